// SPDX-License-Identifier: GPL-2.0
//! errno values by name, both ways, including the kernel-internal ones
//! (ENOTSUPP) that the simulated provider may return.

/// Kernel-internal "operation is not supported" (not in libc).
pub const ENOTSUPP: i32 = 524;

const TABLE: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("EBADF", libc::EBADF),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("ENOSPC", libc::ENOSPC),
    ("ERANGE", libc::ERANGE),
    ("EDEADLK", libc::EDEADLK),
    ("ENOSYS", libc::ENOSYS),
    ("ENOTTY", libc::ENOTTY),
    ("EOVERFLOW", libc::EOVERFLOW),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("ESTALE", libc::ESTALE),
    ("ECANCELED", libc::ECANCELED),
    ("ENOTSUPP", ENOTSUPP),
];

/// Symbolic name of an errno value, or `E<number>` when unknown.
pub fn name(errno: i32) -> String {
    TABLE
        .iter()
        .find(|(_, v)| *v == errno)
        .map(|(n, _)| (*n).to_string())
        .unwrap_or_else(|| format!("E{errno}"))
}

/// Parses `EIO`, `eio`, `5` or `-5` into a positive errno value.
pub fn parse(s: &str) -> Option<i32> {
    let upper = s.to_ascii_uppercase();
    if let Some((_, v)) = TABLE.iter().find(|(n, _)| *n == upper) {
        return Some(*v);
    }
    let n: i32 = s.parse().ok()?;
    let n = n.checked_abs()?;
    (n > 0 && n < 4096).then_some(n)
}

/// Human description of an errno value (strerror, or the kernel's words).
pub fn describe(errno: i32) -> String {
    if errno == ENOTSUPP {
        return "Operation is not supported".to_string();
    }
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (n, v) in TABLE {
            assert_eq!(parse(n), Some(*v));
            assert_eq!(name(*v), *n);
        }
        assert_eq!(parse("eio"), Some(libc::EIO));
        assert_eq!(parse("-12"), Some(12));
        assert_eq!(parse("0"), None);
        assert_eq!(parse("EWHAT"), None);
        assert_eq!(name(4000), "E4000");
        assert_eq!(describe(libc::ENOENT), "No such file or directory");
        assert_eq!(describe(ENOTSUPP), "Operation is not supported");
    }
}
