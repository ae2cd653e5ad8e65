//! A USDT marker as a site: its semaphore, and where the BPF program
//! finds the argument it sums and the string it counts by.

use rig_ebpf::abi::{user_arg, UserArg, UserByArg};

use super::{ByArg, SiteAt, UserProbe, UserProbeError, UserSite};
use crate::elf::usdt::{Arg, Loc, Marker, Reg};
use crate::elf::ElfFacts;

/// Marker `m` of `module` as the site probe `p` counts at: its semaphore's
/// file offset, and where argument `arg` (summed) and the string of `by`
/// (counted by) are when it fires; refused, with the reason, when either
/// cannot be read.
pub(super) fn marker_site(
    p: &UserProbe,
    module: &str,
    facts: &ElfFacts,
    m: &Marker,
    arg: Option<u8>,
    by: Option<ByArg>,
) -> Result<UserSite, UserProbeError> {
    let bad = |why: String| UserProbeError::Argument {
        spec: p.spec(),
        why,
    };
    let semaphore = match m.semaphore {
        None => None,
        Some(s) => Some(s.file_offset.ok_or_else(|| {
            bad(format!(
                "{}:{}'s semaphore ({:#x}) is in no loaded segment of {module}: rig cannot raise \
                 it, and the marker would never fire",
                m.provider, m.name, s.vaddr
            ))
        })?),
    };
    // Where argument `n` is when the marker fires.
    let location = |n: u8| -> Result<UserArg, UserProbeError> {
        let args = m.args.as_ref().map_err(|e| {
            bad(format!(
                "{}:{}'s arguments `{}` cannot be read: {e}",
                m.provider, m.name, m.args_text
            ))
        })?;
        let a = args.get(n as usize).ok_or_else(|| {
            bad(format!(
                "{}:{} in {module} has {} argument(s) (`{}`), numbered from 0: there is no \
                 argument {n}",
                m.provider,
                m.name,
                args.len(),
                m.args_text
            ))
        })?;
        arg_location(a, m.vaddr, |name| {
            crate::elf::usdt::global_address(facts, name)
        })
        .map_err(|why| bad(format!("{}:{} argument {n} ({why})", m.provider, m.name)))
    };
    let mut arg_abi = arg.map(location).transpose()?.unwrap_or_default();
    let mut by_abi = UserByArg::default();
    if let Some(b) = by {
        by_abi.ptr = location(b.arg)?;
        by_abi.len = b.len.map(location).transpose()?.unwrap_or_default();
        arg_abi.flags |= user_arg::BY_STR;
    }
    Ok(UserSite {
        probe: format!("usdt:{}:{}", m.provider, m.name),
        arg,
        by,
        module: module.to_string(),
        file_offset: m.file_offset,
        at: SiteAt::Marker,
        semaphore,
        timed: false,
        ifunc: false,
        arg_abi,
        by_abi,
        caveat: None,
        everywhere: false,
    })
}

/// Where the BPF program finds argument `a` of a marker at link-time
/// address `at`. A global (`sym(%rip)`, `52+sym(%rip)`) is read at its
/// distance from the marker, which `global` gives from the module's symbol
/// tables (the marker and the global move together in any process).
pub fn arg_location(
    a: &Arg,
    at: u64,
    global: impl Fn(&str) -> Result<u64, String>,
) -> Result<UserArg, String> {
    let mut u = UserArg {
        size: a.size,
        is_signed: u8::from(a.signed),
        ..UserArg::default()
    };
    match &a.loc {
        Loc::Const(v) => {
            u.kind = user_arg::CONST;
            u.value = *v;
        }
        Loc::Mem {
            base: Reg::Rip,
            disp,
            symbol: Some(s),
        } => {
            let addr = global(s)?;
            u.kind = user_arg::IPREL;
            u.value = (addr as i64).wrapping_add(*disp).wrapping_sub(at as i64);
        }
        Loc::Reg(Reg::Rip) | Loc::Mem { base: Reg::Rip, .. } => {
            return Err(
                "an address relative to the instruction pointer that names no global; rig \
                 sums arguments in registers, on the stack, in named globals and constants"
                    .into(),
            )
        }
        Loc::Reg(r) => {
            u.kind = user_arg::REG;
            u.reg_off = r.pt_regs_offset();
        }
        Loc::Mem {
            base,
            disp,
            symbol: None,
        } => {
            u.kind = user_arg::MEM;
            u.reg_off = base.pt_regs_offset();
            u.value = *disp;
        }
        Loc::Mem {
            symbol: Some(s), ..
        } => {
            return Err(format!(
                "the global `{s}` read through a register other than the instruction pointer"
            ))
        }
    }
    Ok(u)
}
