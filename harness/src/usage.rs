//! A value rig refuses before it starts anything (exit code 2, like a bad
//! flag): the message names the flag or the file position and the fix.

/// A flag value or a config value that cannot work, found up front.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadValue(pub String);

/// `Err(BadValue)` with a formatted message, as an `anyhow::Error`.
#[macro_export]
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::usage::BadValue(format!($($arg)*))))
    };
}
