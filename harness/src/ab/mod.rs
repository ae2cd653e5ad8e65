pub mod equality;
pub mod identity;
