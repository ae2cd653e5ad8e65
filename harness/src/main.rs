fn main() {
    let code = match rig::cli::run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("rig: error: {err:#}");
            rig::cli::exit_code(&err)
        }
    };
    std::process::exit(code);
}
