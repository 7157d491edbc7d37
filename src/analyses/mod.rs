//! The analyses: each a function from executed results (and the model's facts) to its part of a
//! report: tensor comparison (and what an output decides), task accuracy with the statistics
//! every analysis above it draws on (`accuracy::stats`), placement, how targets ended, rounding
//! fingerprints, drift readings, the per-layer audit, streams.

pub mod accuracy;
pub mod drift;
pub mod fingerprint;
pub mod layers;
pub mod metrics;
pub mod outcome;
pub mod placement;
pub mod stream;
