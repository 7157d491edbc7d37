//! The tool's own seeded generator, specified completely in `docs/inputs.md` so that every
//! platform, and any other tool, gets the same input bytes from the same seed.

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function on an already advanced state.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One `next()` of a stream whose state is `x`; used to derive stream keys.
pub fn mix(x: u64) -> u64 {
    finalize(x.wrapping_add(GOLDEN_GAMMA))
}

/// A SplitMix64 stream.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream whose state is `state` (a bootstrap's: `mix(seed)`, `docs/eval.md`).
    pub fn from_state(state: u64) -> SplitMix64 {
        SplitMix64 { state }
    }

    /// The stream of one input of one sample: `mix(mix(mix(seed) ^ sample) ^ input_index)`.
    pub fn for_input(seed: u64, sample: u64, input_index: u64) -> SplitMix64 {
        SplitMix64 {
            state: mix(mix(mix(seed) ^ sample) ^ input_index),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        finalize(self.state)
    }

    /// A double in [0, 1) with 53 random bits.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform double in [lo, hi].
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_unit()
    }

    /// A normal double by the cosine branch of Box-Muller (two draws per value).
    pub fn normal(&mut self, mean: f64, std: f64) -> f64 {
        let u1 = self.next_unit();
        let u2 = self.next_unit();
        let radius = libm::sqrt(-2.0 * libm::log(1.0 - u1));
        mean + std * radius * libm::cos(2.0 * std::f64::consts::PI * u2)
    }

    /// A uniform integer in [lo, hi], both ends included.
    pub fn uniform_int(&mut self, lo: f64, hi: f64) -> f64 {
        let v = (lo + (self.next_unit() * (hi - lo + 1.0)).floor()).min(hi);
        v.max(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // Sebastiano Vigna's splitmix64.c seeded with 1234567 yields these first outputs.
        let mut s = SplitMix64 { state: 1_234_567 };
        let got: Vec<u64> = (0..5).map(|_| s.next_u64()).collect();
        assert_eq!(
            got,
            vec![
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821
            ]
        );
    }

    #[test]
    fn unit_draws_stay_in_range_and_use_53_bits() {
        let mut s = SplitMix64::for_input(0, 0, 0);
        for _ in 0..10_000 {
            let u = s.next_unit();
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u * (1u64 << 53) as f64, (u * (1u64 << 53) as f64).trunc());
        }
    }

    #[test]
    fn integer_draws_cover_both_ends() {
        let mut s = SplitMix64::for_input(3, 1, 2);
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let v = s.uniform_int(-1.0, 2.0);
            seen[(v + 1.0) as usize] = true;
        }
        assert!(seen.iter().all(|&b| b));
    }
}
