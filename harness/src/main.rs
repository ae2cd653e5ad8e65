fn main() {
    let code = match rig::cli::run() {
        Ok(code) => code,
        Err(err) => {
            rig::errln!("rig: error: {}", rig::cli::error_line(&err));
            rig::cli::exit_code(&err)
        }
    };
    // Probes a session handed to a thread to detach are gone before rig is.
    rig::probe::wait_detached();
    // A SIGINT/SIGTERM ends every command with 130, whatever stage saw it.
    let code = if rig::interrupt::requested() {
        rig::cli::exit::INTERRUPTED
    } else {
        code
    };
    std::process::exit(code);
}
