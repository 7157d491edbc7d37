//! The judge: the policy's limits (file and flags, with their origin) and the one gate that turns
//! every kind of audit's measured figures into rules, a verdict and an exit code.

pub mod gate;
pub mod policy;
