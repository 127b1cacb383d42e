//! What makes a simulated run a function of its seed: the generator that picks deliveries, and
//! which seeds a randomized test runs. Every simulation of the workspace (the agent
//! simulations, the model checker's generated configurations, the leader simulations) uses
//! these, so they all explore runs the same way.

use std::ops::Range;

/// xorshift64*: small, seedable, good enough to shuffle deliveries.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed` (any seed, 0 included, gives a usable state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True about once in `one_in` calls.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in.max(1))
    }

    /// Shuffles `v` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The seeds of a randomized test: `default` of them, or what the environment variable `var`
/// says (`count`, or `first..end`), to explore further than CI has time for.
pub fn seeds_from_env(var: &str, default: u64) -> Range<u64> {
    match std::env::var(var) {
        Ok(v) => match v.split_once("..") {
            Some((a, b)) => a.parse().unwrap_or(0)..b.parse().unwrap_or(default),
            None => 0..v.parse().unwrap_or(default),
        },
        Err(_) => 0..default,
    }
}
