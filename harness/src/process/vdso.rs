//! The vDSO: the kernel's code mapped into every process as `[vdso]`
//! (clock_gettime, gettimeofday, time, getcpu, getrandom). It is a small
//! ELF shared object with `.eh_frame` and a `.dynsym`, the same image in
//! every 64-bit process on one kernel, so rig reads its own copy once and
//! uses it for every target: the unwind rows that take a stack out of the
//! vDSO (a `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` falls back to a
//! `syscall` instruction inside it) and the names of its functions.

use std::sync::OnceLock;

/// The pseudo path of the vDSO's mapping in `/proc/PID/maps`.
pub const PATH: &str = "[vdso]";

/// The vDSO's bytes, as mapped into rig itself; `None` where the kernel
/// maps none or it cannot be read.
pub fn image() -> Option<&'static [u8]> {
    static IMAGE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    IMAGE.get_or_init(read_own).as_deref()
}

fn read_own() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with(PATH))?;
    let (range, _) = line.split_once(' ')?;
    let (lo, hi) = range.split_once('-')?;
    let (lo, hi) = (
        u64::from_str_radix(lo, 16).ok()?,
        u64::from_str_radix(hi, 16).ok()?,
    );
    let mut buf = vec![0u8; usize::try_from(hi.checked_sub(lo)?).ok()?];
    let mem = std::fs::File::open("/proc/self/mem").ok()?;
    mem.read_exact_at(&mut buf, lo).ok()?;
    Some(buf)
}

/// The function of the vDSO at `offset` (from the start of its mapping,
/// which is its link address) and the offset into it. Of two names for one
/// function (`clock_gettime` and `__vdso_clock_gettime`) the global one,
/// `__vdso_…` (its other name is weak), is given: it says where the code is.
pub fn symbol_at(offset: u64) -> Option<(&'static str, u64)> {
    static SYMS: OnceLock<Vec<(u64, u64, bool, String)>> = OnceLock::new();
    let syms = SYMS.get_or_init(|| {
        use object::{Object, ObjectSymbol, SymbolKind};
        let Some(obj) = image().and_then(|d| object::File::parse(d).ok()) else {
            return Vec::new();
        };
        obj.dynamic_symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| {
                let name = s.name().ok()?.to_string();
                Some((s.address(), s.size(), !s.is_weak(), name))
            })
            .collect()
    });
    syms.iter()
        .filter(|(a, size, _, _)| *a <= offset && offset < a + size)
        .max_by_key(|(_, _, strong, _)| *strong)
        .map(|(a, _, _, name)| (name.as_str(), offset - a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vdso_is_read_and_its_functions_named() {
        let image = image().expect("Linux maps a vDSO into every process");
        assert_eq!(&image[..4], b"\x7fELF");
        use object::{Object, ObjectSymbol};
        let obj = object::File::parse(image).unwrap();
        let gettime = obj
            .dynamic_symbols()
            .find(|s| s.name() == Ok("__vdso_clock_gettime"))
            .expect("x86_64's vDSO exports __vdso_clock_gettime");
        assert_eq!(
            symbol_at(gettime.address() + 3),
            Some(("__vdso_clock_gettime", 3))
        );
        assert_eq!(symbol_at(0), None, "the ELF header is no function");
    }
}
