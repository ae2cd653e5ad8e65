//! Files and directories rig creates, usually as root and often in shared
//! places (`/tmp`, a path the user gave).
//!
//! Another local user can plant a directory under a predictable name or a
//! symlink where rig is about to write, and so make root overwrite any file
//! or edit a config before the target reads it. So:
//! - scratch directories come from `mkdtemp` (a random name, made new, mode
//!   0700), never from a name someone can guess and create first;
//! - every file is created with `O_CREAT|O_EXCL|O_NOFOLLOW`: an existing
//!   file or a symlink in its place is refused, never written through;
//! - a directory inside a private directory is made with `mkdir` (it must
//!   not exist yet), and a path component that is a symlink is refused.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// A new private directory `<tmp>/<prefix>XXXXXX` (mode 0700, owned by rig's
/// user). The caller removes it.
pub fn private_dir(prefix: &str) -> io::Result<PathBuf> {
    private_dir_in(&std::env::temp_dir(), prefix)
}

/// [`private_dir`] under `parent`.
pub fn private_dir_in(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)?;
    Ok(dir.keep())
}

/// Create `path`, which must not exist (not even as a dangling symlink), for
/// writing, with `mode` (before umask).
pub fn create_new_mode(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| explain(path, e))
}

/// [`create_new_mode`] with mode 0644: results are meant to be read.
pub fn create_new(path: &Path) -> io::Result<File> {
    create_new_mode(path, 0o644)
}

/// Write `data` to the new file `path` (see [`create_new`]) and sync it.
pub fn write_new(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = create_new(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// Replace the file `path` with `data` atomically: the bytes go to a new
/// file beside it (see [`create_new`]), which is synced and then renamed
/// over `path`. A symlink at `path` is replaced by the file, never written
/// through, and a reader sees the old contents or the new, never half.
/// The new file keeps the old file's mode.
pub fn replace_file(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mode = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file())
        .map_or(0o644, |m| m.permissions().mode() & 0o7777);
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".rig-new")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    let mut f = tmp.as_file();
    f.write_all(data)?;
    f.sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Create the directory `path`, which must not exist yet (a symlink in its
/// place is refused too), after making its parents as `mkdir -p` does.
pub fn create_new_dir(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(path)
        .map_err(|e| explain(path, e))
}

/// Make the directories of `rel` below `base` (which rig made private),
/// refusing a symlink on the way. `rel` must be relative without `..`.
pub fn make_dirs_below(base: &Path, rel: &Path) -> io::Result<()> {
    let mut at = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(n) => at.push(n),
            Component::CurDir => continue,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: only plain names below {}",
                        rel.display(),
                        base.display()
                    ),
                ))
            }
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a directory", at.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().mode(0o755).create(&at)?
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Refuse `path` for a new output file now, before any work is done: it must
/// not exist (nor be a symlink) and its directory must exist and be
/// writable.
pub fn check_new_file(flag: &str, path: &Path) -> Result<(), String> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let what = if m.file_type().is_symlink() {
            "is a symlink"
        } else {
            "already exists"
        };
        return Err(format!(
            "{flag} {}: {what}; rig writes results to a new file only and never overwrites or \
             follows a link: give a new path",
            path.display()
        ));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!(
            "{flag} {}: the directory {} does not exist",
            path.display(),
            parent.display()
        ));
    }
    check_writable_dir(flag, path, parent)
}

/// Refuse `path` now when rig could not create anything in `dir`, its
/// directory: a read-only mount (which even root cannot write) or a
/// directory rig's user may not write, found before the work whose result
/// would be lost.
pub fn check_writable_dir(flag: &str, path: &Path, dir: &Path) -> Result<(), String> {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return Err(format!("{flag} {}: a NUL byte in the path", path.display()));
    };
    // SAFETY: a valid C string; access only reads it. EROFS is returned
    // for a read-only file system whoever asks.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::EROFS) => "is on a read-only file system".to_string(),
            Some(libc::EACCES) => "is not writable by rig's user".to_string(),
            _ => format!("cannot be written: {e}"),
        };
        return Err(format!(
            "{flag} {}: the directory {} {why}; give a path rig can write",
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Why [`read_config`] refused a path without reading it (inside the
/// `io::Error` it returns): a bad config value, exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAConfig(pub String);

/// Whether `err` is, or was caused by, a [`read_config`] refusal.
pub fn is_not_a_config(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut e: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(x) = e {
        if x.is::<NotAConfig>()
            || x.downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<NotAConfig>())
        {
            return true;
        }
        e = x.source();
    }
    false
}

/// The most bytes a config file (a matrix, a target spec, a gate
/// baseline) may hold. The largest in config/ is a few KiB; a matrix of
/// 16,667 suites is under 2 MiB.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The config file `path`, read whole: a regular file of at most
/// [`MAX_CONFIG_BYTES`]. A FIFO, a device (`/dev/zero`), a socket or a
/// directory is refused without reading from it (the open does not wait
/// for a FIFO's writer), and so is a larger file, so loading a config can
/// neither block nor fill memory.
pub fn read_config(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    let ft = m.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            NotAConfig(format!(
                "{what}: rig reads a config from a regular file only"
            )),
        ));
    }
    let too_big = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            NotAConfig(format!(
                "larger than the {} MiB a config file may be",
                MAX_CONFIG_BYTES >> 20
            )),
        )
    };
    if m.len() > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    let mut text = String::with_capacity(m.len() as usize);
    // A file that grows while it is read is still read only to the bound.
    f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    Ok(text)
}

fn explain(path: &Path, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EEXIST) => "already exists; rig never overwrites a file".to_string(),
        Some(libc::ELOOP) => "is a symlink; rig never writes through a link".to_string(),
        _ => e.to_string(),
    };
    io::Error::new(e.kind(), format!("{}: {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn private_dirs_are_new_mode_0700_and_distinct() {
        let a = private_dir("rig-fsutil-test-").unwrap();
        let b = private_dir("rig-fsutil-test-").unwrap();
        assert_ne!(a, b);
        let m = std::fs::symlink_metadata(&a).unwrap();
        assert!(m.file_type().is_dir());
        assert_eq!(m.mode() & 0o777, 0o700);
        // SAFETY: no preconditions.
        assert_eq!(m.uid(), unsafe { libc::geteuid() });
        std::fs::remove_dir(&a).unwrap();
        std::fs::remove_dir(&b).unwrap();
    }

    #[test]
    fn create_new_refuses_an_existing_file_and_a_symlink() {
        let d = private_dir("rig-fsutil-test-").unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let e = create_new(&victim).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("never overwrites"), "{e}");

        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(write_new(&link, b"evil").is_err());
        let dangling = d.join("dangling");
        std::os::unix::fs::symlink(d.join("nothing"), &dangling).unwrap();
        assert!(write_new(&dangling, b"evil").is_err());
        assert!(
            !d.join("nothing").exists(),
            "no write through a dangling link"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

        write_new(&d.join("fresh"), b"ok").unwrap();
        assert_eq!(std::fs::read(d.join("fresh")).unwrap(), b"ok");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn read_config_refuses_fifos_devices_directories_and_big_files_without_reading() {
        let d = private_dir("rig-fsutil-test-").unwrap();
        let fifo = d.join("fifo.toml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens it: a blocking open would wait forever.
        let e = read_config(&fifo).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = read_config(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let e = read_config(&d).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let big = d.join("big.toml");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_CONFIG_BYTES + 1).unwrap();
        let e = read_config(&big).unwrap_err();
        assert!(e.to_string().contains("16 MiB"), "{e}");
        std::fs::write(d.join("ok.toml"), "name = 'x'\n").unwrap();
        assert_eq!(read_config(&d.join("ok.toml")).unwrap(), "name = 'x'\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn make_dirs_below_refuses_a_symlinked_component() {
        let d = private_dir("rig-fsutil-test-").unwrap();
        let elsewhere = private_dir("rig-fsutil-test-").unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.join("conf")).unwrap();
        assert!(make_dirs_below(&d, Path::new("conf/sub")).is_err());
        assert!(!elsewhere.join("sub").exists());
        assert!(make_dirs_below(&d, Path::new("../x")).is_err());
        make_dirs_below(&d, Path::new("a/b")).unwrap();
        assert!(d.join("a/b").is_dir());
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[test]
    fn replace_file_replaces_a_link_instead_of_writing_through_it() {
        let d = private_dir("rig-fsutil-test-").unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.join("baseline.toml");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        replace_file(&link, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_file());
        assert_eq!(std::fs::read(&link).unwrap(), b"new");

        let own = d.join("own.toml");
        std::fs::write(&own, "old").unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
        replace_file(&own, b"blessed").unwrap();
        assert_eq!(std::fs::read(&own).unwrap(), b"blessed");
        assert_eq!(std::fs::metadata(&own).unwrap().mode() & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".rig-new"))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn create_new_dir_refuses_an_existing_dir_and_a_symlink() {
        let d = private_dir("rig-fsutil-test-").unwrap();
        let elsewhere = private_dir("rig-fsutil-test-").unwrap();
        create_new_dir(&d.join("a/b/flame")).unwrap();
        assert!(d.join("a/b/flame").is_dir());
        let e = create_new_dir(&d.join("a/b/flame")).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        std::os::unix::fs::symlink(&elsewhere, d.join("link")).unwrap();
        assert!(create_new_dir(&d.join("link")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[test]
    fn check_new_file_refuses_existing_links_and_missing_dirs() {
        let d = private_dir("rig-fsutil-test-").unwrap();
        std::fs::write(d.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(d.join("f"), d.join("l")).unwrap();
        assert!(check_new_file("--json", &d.join("f"))
            .unwrap_err()
            .contains("already exists"));
        assert!(check_new_file("--json", &d.join("l"))
            .unwrap_err()
            .contains("is a symlink"));
        assert!(check_new_file("--json", &d.join("no/such"))
            .unwrap_err()
            .contains("does not exist"));
        assert!(check_new_file("--json", &d.join("new.json")).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
