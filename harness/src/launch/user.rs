//! The user a target runs as (`user = "name"`, `group = "name"` in its spec,
//! or `--user`). rig sets up the cgroup and CPU pinning as root, then the
//! launched child drops to this user before exec.

/// Resolved ids of the account a target runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// Look up `user` (a name or a numeric uid) and `group` (name or gid;
/// default: the user's primary group) in the system databases.
pub fn resolve(user: &str, group: Option<&str>) -> Result<RunAs, String> {
    let (uid, primary) = lookup_user(user)?;
    let gid = match group {
        Some(g) => lookup_group(g)?,
        None => primary,
    };
    Ok(RunAs { uid, gid })
}

fn lookup_user(user: &str) -> Result<(u32, u32), String> {
    let name =
        std::ffi::CString::new(user).map_err(|_| format!("user {user:?}: a NUL in the name"))?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter; buf outlives the call
    // and the strings in pw point into it (not used after).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let r = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    if r == 0 && !out.is_null() {
        return Ok((pw.pw_uid, pw.pw_gid));
    }
    if let Ok(uid) = user.parse::<u32>() {
        // A numeric uid with no account: its own number as the group.
        let r =
            unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
        return Ok((
            uid,
            if r == 0 && !out.is_null() {
                pw.pw_gid
            } else {
                uid
            },
        ));
    }
    Err(format!(
        "user `{user}`: no such user on this host (give an existing name or a uid)"
    ))
}

fn lookup_group(group: &str) -> Result<u32, String> {
    let name =
        std::ffi::CString::new(group).map_err(|_| format!("group {group:?}: a NUL in the name"))?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: as in lookup_user.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    let r = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    if r == 0 && !out.is_null() {
        return Ok(gr.gr_gid);
    }
    group.parse::<u32>().map_err(|_| {
        format!("group `{group}`: no such group on this host (give an existing name or a gid)")
    })
}

/// Real uid and gid of a running process (`/proc/<pid>/status`).
pub fn ids_of(pid: u32) -> Option<RunAs> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| -> Option<u32> {
        s.lines()
            .find_map(|l| l.strip_prefix(k))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(RunAs {
        uid: field("Uid:")?,
        gid: field("Gid:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_and_numbers_and_refuses_unknown_users() {
        assert_eq!(resolve("root", None).unwrap(), RunAs { uid: 0, gid: 0 });
        let nobody = resolve("nobody", Some("nogroup")).unwrap();
        assert_eq!(nobody.uid, 65534);
        assert_eq!(resolve("65534", Some("65534")).unwrap().gid, 65534);
        assert!(resolve("no-such-user-rig", None)
            .unwrap_err()
            .contains("no such user"));
        assert!(resolve("root", Some("no-such-group-rig")).is_err());
        assert_eq!(ids_of(std::process::id()).unwrap().uid, unsafe {
            libc::getuid()
        });
    }
}
