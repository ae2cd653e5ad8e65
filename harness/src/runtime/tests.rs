//! The runtimes' answers: which module is the C library, what each
//! counts for copies and locks, and their names.
use super::*;

#[test]
fn the_c_library_and_a_plain_program_are_told_apart() {
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let facts = ElfFacts::load(Path::new(libc)).unwrap();
    assert_eq!(
        ModuleKind::of(libc, &facts),
        ModuleKind::CLibrary { libc: Libc::Glibc }
    );
    let exe = std::env::current_exe().unwrap();
    let facts = ElfFacts::load(&exe).unwrap();
    assert_eq!(
        ModuleKind::of(&exe.display().to_string(), &facts),
        ModuleKind::Native
    );
}

#[test]
fn the_c_library_of_this_process_is_its_libc_so() {
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let (path, kind) = c_library(std::process::id(), &maps).unwrap();
    assert!(basename(&path).starts_with("libc.so"), "{path}");
    assert_eq!(kind, ModuleKind::CLibrary { libc: Libc::Glibc });
}

#[test]
fn the_c_libraries_answer_for_copies_and_mutexes_and_nothing_else_does() {
    let facts = ElfFacts::default();
    let module = |kind| Module {
        kind,
        facts: &facts,
    };
    for libc in [Libc::Glibc, Libc::Musl] {
        for kind in [ModuleKind::CLibrary { libc }, ModuleKind::StaticC { libc }] {
            let m = module(kind);
            let copies = copy_api(&m).unwrap_or_else(|| panic!("{kind:?}"));
            assert_eq!(copies.counted, ["memcpy", "memmove", "memset"]);
            assert_eq!(lock_api(&m).unwrap().lock, "pthread_mutex_lock");
        }
    }
    for kind in [
        ModuleKind::Go {
            version: None,
            specialized: None,
        },
        ModuleKind::Jit,
        ModuleKind::Native,
    ] {
        assert!(copy_api(&module(kind)).is_none(), "{kind:?}");
        assert!(lock_api(&module(kind)).is_none(), "{kind:?}");
    }
    // Go copies with its own routines, where its build passes their
    // arguments in registers.
    let go = |major, minor| {
        module(ModuleKind::Go {
            version: Some(GoVersion { major, minor }),
            specialized: None,
        })
    };
    let names = |m: &Module<'_>| -> Result<Vec<&str>, String> {
        Ok(own_copies(m)?.iter().map(|o| o.symbol).collect())
    };
    let own = ["runtime.memmove", "runtime.memclrNoHeapPointers"];
    assert_eq!(names(&go(1, 17)), Ok(own.to_vec()));
    assert!(names(&go(1, 16)).unwrap_err().starts_with("is go1.16: "));
    assert_eq!(names(&module(ModuleKind::Native)), Ok(vec![]));
    // ... and locks with its own slow paths, under the names they had in
    // each version.
    let locks = own_locks(&go(1, 27)).unwrap();
    let first: Vec<&str> = locks.iter().map(|l| l.symbols[0]).collect();
    assert_eq!(
        first,
        [
            "sync.(*Mutex).lockSlow",
            "sync.runtime_SemacquireRWMutexR",
            "sync.runtime_SemacquireRWMutex",
            "sync.runtime_SemacquireMutex",
            "runtime.lock2"
        ]
    );
    assert!(locks[0]
        .symbols
        .contains(&"internal/sync.(*Mutex).lockSlow"));
    assert!(own_locks(&go(1, 16)).is_err());
    assert!(own_locks(&module(ModuleKind::Native)).unwrap().is_empty());
    // A copy site is reported under every name any runtime counts.
    let mut all = vec!["memcpy", "memmove", "memset", "mempcpy"];
    all.extend(own);
    assert_eq!(copy_names(), all);
}

#[test]
fn musls_shared_library_is_the_c_library_under_each_of_its_names() {
    for p in [
        "/lib/ld-musl-x86_64.so.1",
        "/lib/libc.musl-x86_64.so.1",
        "/usr/lib/x86_64-linux-musl/libc.so",
    ] {
        assert!(is_shared_c_library_name(p), "{p}");
    }
    assert!(!is_shared_c_library_name("/usr/lib/libcurl.so.4"));
}

#[test]
fn a_jvm_names_its_interpreter_and_calls_only_its_compiled_methods_the_programs() {
    use super::jvm::Jvm;
    let own = |n: &str| Jvm.jit_own_code(n);
    // JDK 17's `Compiler.perfmap` names, as it wrote them for the fixture.
    assert!(!own("int Server.work()"));
    assert!(!own("void Server$Item.<init>(int)"));
    assert!(!own(
        "java.lang.String com.sun.net.httpserver.Headers.normalize(java.lang.String)"
    ));
    assert!(!own("[interpreted Java]"));
    for stub in [
        "dtrace_object_alloc Runtime1 stub",
        "StubRoutines (1)",
        "_new_instance_Java",
        "I2C/C2I adapters(0xbbbbbbbb)",
        "SafepointBlob",
        "Interpreter",
    ] {
        assert!(own(stub), "{stub}");
    }
    assert_eq!(
        Jvm.jit_function("Interpreter").as_deref(),
        Some("[interpreted Java]")
    );
    assert_eq!(Jvm.jit_function("int Server.work()"), None);
}
