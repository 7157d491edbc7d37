//! The analyses: each a function from executed results (and the model's facts) to its part of a
//! report: tensor comparison, placement, how targets ended, rounding fingerprints, drift
//! readings, the per-layer audit, streams, and task accuracy with its statistics.

pub mod accuracy;
pub mod drift;
pub mod fingerprint;
pub mod layers;
pub mod metrics;
pub mod outcome;
pub mod placement;
pub mod stream;
