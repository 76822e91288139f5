// SPDX-License-Identifier: GPL-2.0
//! Deterministic byte patterns: written by one side of a transfer, recomputed
//! and compared by the other. A pattern is a function of the byte's offset in
//! the buffer, so any window of it can be produced or checked on its own.

use std::fmt;

/// A byte pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Every byte the same (sentinels such as 0xA5).
    Fill(u8),
    /// `offset ^ (offset >> 8) ^ (offset >> 16)` truncated to a byte: changes
    /// every byte and across 256-byte and 64 KiB periods.
    Seq,
    /// Pseudo-random bytes from a seed (splitmix64 of seed and offset / 8).
    Seeded(u64),
}

/// splitmix64: a small, good 64-bit mixer (public domain algorithm).
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Pattern {
    /// Parses `0xA5` / `fill:0xA5` / `seq` / `seed:N` (or `rand:N`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid pattern {s:?} (use 0xA5, fill:0xA5, seq or seed:N)");
        if s == "seq" {
            return Ok(Pattern::Seq);
        }
        if let Some(n) = s.strip_prefix("seed:").or_else(|| s.strip_prefix("rand:")) {
            return crate::parse::number(n)
                .map(Pattern::Seeded)
                .map_err(|_| bad());
        }
        let f = s.strip_prefix("fill:").unwrap_or(s);
        let n = crate::parse::number(f).map_err(|_| bad())?;
        u8::try_from(n).map(Pattern::Fill).map_err(|_| bad())
    }

    /// The byte at `offset`.
    pub fn byte_at(&self, offset: u64) -> u8 {
        match *self {
            Pattern::Fill(b) => b,
            Pattern::Seq => (offset ^ (offset >> 8) ^ (offset >> 16)) as u8,
            Pattern::Seeded(seed) => {
                let w = splitmix64(seed ^ splitmix64(offset / 8));
                (w >> ((offset % 8) * 8)) as u8
            }
        }
    }

    /// Fills `buf` with the pattern's bytes for offsets `base..base+len`.
    pub fn fill(&self, base: u64, buf: &mut [u8]) {
        match *self {
            Pattern::Fill(b) => buf.fill(b),
            Pattern::Seeded(seed) => {
                // One mixer call per 8-byte word instead of per byte.
                let mut i = 0;
                while i < buf.len() {
                    let off = base + i as u64;
                    let w = splitmix64(seed ^ splitmix64(off / 8));
                    let start = (off % 8) as usize;
                    let n = (8 - start).min(buf.len() - i);
                    for k in 0..n {
                        buf[i + k] = (w >> ((start + k) * 8)) as u8;
                    }
                    i += n;
                }
            }
            Pattern::Seq => {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = self.byte_at(base + i as u64);
                }
            }
        }
    }

    /// A new buffer of `len` bytes holding the pattern from offset `base`.
    pub fn make(&self, base: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(base, &mut v);
        v
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Fill(b) => write!(f, "fill:0x{b:02x}"),
            Pattern::Seq => write!(f, "seq"),
            Pattern::Seeded(s) => write!(f, "seed:{s}"),
        }
    }
}

/// One byte that differs from what was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset inside the compared window.
    pub offset: u64,
    pub expected: u8,
    pub actual: u8,
}

/// Result of comparing a buffer against what it should hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Total number of differing bytes.
    pub mismatched_bytes: u64,
    /// The first few differing bytes, in offset order.
    pub first: Vec<Mismatch>,
}

impl Comparison {
    /// True when every byte matched.
    pub fn ok(&self) -> bool {
        self.mismatched_bytes == 0
    }
}

/// Compares `actual` with `expected`, keeping the first `keep` mismatches.
pub fn compare(expected: &[u8], actual: &[u8], keep: usize) -> Comparison {
    let mut c = Comparison::default();
    let n = expected.len().min(actual.len());
    for i in 0..n {
        if expected[i] != actual[i] {
            c.mismatched_bytes += 1;
            if c.first.len() < keep {
                c.first.push(Mismatch {
                    offset: i as u64,
                    expected: expected[i],
                    actual: actual[i],
                });
            }
        }
    }
    let extra = expected.len().abs_diff(actual.len()) as u64;
    c.mismatched_bytes += extra;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_patterns() {
        assert_eq!(Pattern::parse("0xa5"), Ok(Pattern::Fill(0xa5)));
        assert_eq!(Pattern::parse("fill:7"), Ok(Pattern::Fill(7)));
        assert_eq!(Pattern::parse("seq"), Ok(Pattern::Seq));
        assert_eq!(Pattern::parse("seed:42"), Ok(Pattern::Seeded(42)));
        assert_eq!(Pattern::parse("rand:0x10"), Ok(Pattern::Seeded(16)));
        assert!(Pattern::parse("0x100").is_err());
        assert!(Pattern::parse("zebra").is_err());
        for p in [Pattern::Fill(3), Pattern::Seq, Pattern::Seeded(9)] {
            assert_eq!(Pattern::parse(&p.to_string()), Ok(p));
        }
    }

    #[test]
    fn windows_agree_with_whole() {
        for p in [Pattern::Seq, Pattern::Seeded(1234), Pattern::Fill(0x5a)] {
            let whole = p.make(0, 4096);
            let part = p.make(1001, 999);
            assert_eq!(&whole[1001..2000], &part[..]);
        }
    }

    #[test]
    fn seeded_is_nontrivial() {
        let a = Pattern::Seeded(1).make(0, 4096);
        let b = Pattern::Seeded(2).make(0, 4096);
        assert_ne!(a, b);
        let distinct = a.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(distinct > 200, "{distinct}");
        // No 8-byte period: offsets 0..8 and 8..16 differ.
        assert_ne!(a[0..8], a[8..16]);
    }

    #[test]
    fn compare_reports_first_offsets() {
        let e = vec![1u8; 100];
        let mut a = e.clone();
        a[10] = 2;
        a[50] = 3;
        a[99] = 4;
        let c = compare(&e, &a, 2);
        assert!(!c.ok());
        assert_eq!(c.mismatched_bytes, 3);
        assert_eq!(
            c.first,
            vec![
                Mismatch {
                    offset: 10,
                    expected: 1,
                    actual: 2
                },
                Mismatch {
                    offset: 50,
                    expected: 1,
                    actual: 3
                }
            ]
        );
        assert!(compare(&e, &e, 4).ok());
        assert_eq!(compare(&e, &e[..90], 4).mismatched_bytes, 10);
    }
}
