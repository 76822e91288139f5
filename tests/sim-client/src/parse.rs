// SPDX-License-Identifier: GPL-2.0
//! Parsing of the numbers the CLIs take: sizes with suffixes, addresses in hex.

/// Parses `65536`, `0x10000`, `64K`, `64KiB`, `2M`, `1G`, `16GiB`.
pub fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (digits, mult) = [
        ("kib", 1u64 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("tib", 1 << 40),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
        ("t", 1 << 40),
    ]
    .iter()
    .find_map(|(suf, m)| {
        (!lower.starts_with("0x"))
            .then(|| lower.strip_suffix(suf).map(|d| (d.to_string(), *m)))
            .flatten()
    })
    .unwrap_or((lower.clone(), 1));
    let n = number(&digits)
        .map_err(|_| format!("invalid size {s:?} (examples: 4096, 0x1000, 64K, 2MiB)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} overflows 64 bits"))
}

/// Parses a decimal or `0x` hexadecimal unsigned number.
pub fn number(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse::<u64>()
    };
    r.map_err(|_| format!("invalid number {s:?}"))
}

/// Parses a u32 (decimal or hex).
pub fn number32(s: &str) -> Result<u32, String> {
    let n = number(s)?;
    u32::try_from(n).map_err(|_| format!("{s:?} does not fit in 32 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size("65536"), Ok(65536));
        assert_eq!(size("0x10000"), Ok(65536));
        assert_eq!(size("64K"), Ok(65536));
        assert_eq!(size("64KiB"), Ok(65536));
        assert_eq!(size("2m"), Ok(2 << 20));
        assert_eq!(size("16GiB"), Ok(16 << 30));
        assert!(size("0xfk").is_err());
        assert!(size("").is_err());
        assert!(size("-1").is_err());
        assert!(size("abc").is_err());
        assert!(size("99999999999T").is_err());
    }

    #[test]
    fn numbers() {
        assert_eq!(number("0xdeadBEEF"), Ok(0xdead_beef));
        assert_eq!(number("12"), Ok(12));
        assert!(number("12x").is_err());
        assert!(number32("0x100000000").is_err());
        assert_eq!(number32("7"), Ok(7));
    }
}
