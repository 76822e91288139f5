// SPDX-License-Identifier: GPL-2.0
//! Kernel-log signatures of the field's known GPUDirect RDMA failures.

use crate::report::Verdict;

/// One known failure signature.
pub struct Signature {
    pub id: &'static str,
    /// Every needle must occur in the same line.
    pub needles: &'static [&'static str],
    pub verdict: Verdict,
    pub meaning: &'static str,
    pub fix: &'static str,
}

pub const SIGNATURES: &[Signature] = &[
    Signature {
        id: "unknown_symbol_peer_mem",
        needles: &["Unknown symbol ib_register_peer_memory_client"],
        verdict: Verdict::Fail,
        meaning: "a peer-memory client was built for MLNX_OFED but this ib_core is the inbox one (no PeerDirect API)",
        fix: "install MLNX_OFED/DOCA-OFED for this kernel, or use the dma-buf path (open NVIDIA modules)",
    },
    Signature {
        id: "symbol_version_mismatch",
        needles: &["disagrees about version of symbol"],
        verdict: Verdict::Fail,
        meaning: "a module was built against another ib_core/nvidia Module.symvers than the one loaded",
        fix: "rebuild the peer-memory client against the running OFED and driver (dkms autoinstall)",
    },
    Signature {
        id: "peerdirect_support_invalid",
        needles: &["peerdirect_support", "nvalid"],
        verdict: Verdict::Fail,
        meaning: "a peer-memory client refused its peerdirect_support parameter",
        fix: "set peerdirect_support=0 (MLNX_OFED 5.1+) or 1 (4.9 LTS / 5.0 and older) in /etc/modprobe.d",
    },
    Signature {
        id: "nv_mem_name_taken",
        needles: &["nv_mem", "already"],
        verdict: Verdict::Fail,
        meaning: "another peer-memory client already registered the name nv_mem",
        fix: "unload the other client (rmmod nvidia_peermem / nv_peer_mem) before loading ours",
    },
    Signature {
        id: "peer_mem_register_failed",
        needles: &["ib_register_peer_memory_client", "fail"],
        verdict: Verdict::Fail,
        meaning: "registration with the PeerDirect core failed",
        fix: "see the lines around it in dmesg; check that only one peer-memory client is loaded",
    },
    Signature {
        id: "lock_inversion",
        needles: &["possible circular locking dependency"],
        verdict: Verdict::Fail,
        meaning: "lockdep saw a lock-order inversion (MOFED bug 2696789 pattern if it names the peer-memory locks)",
        fix: "use peerdirect_support=0 with a core that supports PEER_MEM_INVALIDATE_UNMAPS (MLNX_OFED 5.3-1.0.0.1.43+)",
    },
    Signature {
        id: "hung_task",
        needles: &["blocked for more than"],
        verdict: Verdict::Warn,
        meaning: "a task hung in D state (deregistration vs cudaFree deadlocks look like this)",
        fix: "check the stack in dmesg for ib_umem/peer_mem and nvidia_p2p frames",
    },
    Signature {
        id: "kernel_oops",
        needles: &["Oops"],
        verdict: Verdict::Fail,
        meaning: "the kernel oopsed",
        fix: "read the oops in dmesg; if it names nvidia, peermem or ib_ frames, report it with the log",
    },
    Signature {
        id: "kernel_bug",
        needles: &["BUG:"],
        verdict: Verdict::Fail,
        meaning: "the kernel reported a BUG (KASAN, NULL dereference, bad page state...)",
        fix: "read the report in dmesg; if it names nvidia, peermem or ib_ frames, report it with the log",
    },
    Signature {
        id: "nvidia_xid",
        needles: &["NVRM: Xid"],
        verdict: Verdict::Warn,
        meaning: "the GPU reported an Xid error",
        fix: "look the Xid number up in NVIDIA's Xid table; check GPU health (nvidia-smi -q)",
    },
    Signature {
        id: "nvidia_p2p_error",
        needles: &["NVRM", "P2P"],
        verdict: Verdict::Warn,
        meaning: "the NVIDIA driver logged a P2P message",
        fix: "read the line; BAR1 exhaustion or an unsupported platform are common causes",
    },
];

/// A signature that matched, with its first matching line and count.
pub struct Hit {
    pub sig: &'static Signature,
    pub count: usize,
    pub first_line: String,
}

/// Scans a kernel log.
pub fn scan(log: &str) -> Vec<Hit> {
    let mut hits: Vec<Hit> = Vec::new();
    for line in log.lines() {
        // The most specific signature wins for a line.
        if let Some(sig) = SIGNATURES
            .iter()
            .find(|s| s.needles.iter().all(|n| line.contains(n)))
        {
            match hits.iter_mut().find(|h| h.sig.id == sig.id) {
                Some(h) => h.count += 1,
                None => hits.push(Hit {
                    sig,
                    count: 1,
                    first_line: line.trim().to_string(),
                }),
            }
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_known_lines() {
        let log = "\
[    1.0] ok line
[    2.0] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)
[    2.1] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)
[    3.0] nv_peer_mem: disagrees about version of symbol ib_umem_get
[    4.0] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.
";
        let hits = scan(log);
        let ids: Vec<&str> = hits.iter().map(|h| h.sig.id).collect();
        assert_eq!(
            ids,
            vec![
                "unknown_symbol_peer_mem",
                "symbol_version_mismatch",
                "nvidia_xid"
            ]
        );
        assert_eq!(hits[0].count, 2);
        assert!(hits[0].first_line.contains("err -2"));
        assert!(scan("all quiet\n").is_empty());
    }
}
