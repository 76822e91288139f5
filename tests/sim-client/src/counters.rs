// SPDX-License-Identifier: GPL-2.0
//! Named views of the counter structures, for key=value output and checks.

use crate::uapi::{PsimCounters, PsimLeakCheck, PsimPhaseTimes, PSIM_PHASE_NAMES};

/// Every counter of `struct psim_counters` (reserved words excluded), by name.
pub fn counter_fields(c: &PsimCounters) -> [(&'static str, u64); 36] {
    [
        ("gpu_allocs_live", c.gpu_allocs_live),
        ("gpu_bytes_live", c.gpu_bytes_live),
        ("pages_pinned", c.pages_pinned),
        ("page_tables_live", c.page_tables_live),
        ("dma_mappings_live", c.dma_mappings_live),
        ("free_callbacks", c.free_callbacks),
        ("get_pages_calls", c.get_pages_calls),
        ("put_pages_calls", c.put_pages_calls),
        ("clients_registered", c.clients_registered),
        ("mrs_live", c.mrs_live),
        ("num_alloc_mrs", c.num_alloc_mrs),
        ("num_dealloc_mrs", c.num_dealloc_mrs),
        ("num_reg_pages", c.num_reg_pages),
        ("num_dereg_pages", c.num_dereg_pages),
        ("num_reg_bytes", c.num_reg_bytes),
        ("num_dereg_bytes", c.num_dereg_bytes),
        ("num_free_callbacks", c.num_free_callbacks),
        ("faults_injected", c.faults_injected),
        ("delays_taken", c.delays_taken),
        ("win_invalidate_unlocked", c.win_invalidate_unlocked),
        ("win_dereg_unlocked", c.win_dereg_unlocked),
        ("win_put_release", c.win_put_release),
        ("win_release_in_invalidation", c.win_release_in_invalidation),
        ("win_free_in_get_pages", c.win_free_in_get_pages),
        ("win_free_pinned", c.win_free_pinned),
        ("win_free_in_dma_map", c.win_free_in_dma_map),
        ("win_free_before_activate", c.win_free_before_activate),
        ("win_free_live", c.win_free_live),
        ("win_free_in_dereg", c.win_free_in_dereg),
        ("win_free_reg", c.win_free_reg),
        ("win_free_dereg", c.win_free_dereg),
        ("win_free_in_acquire", c.win_free_in_acquire),
        ("delays_held", c.delays_held),
        ("frees_started", c.frees_started),
        ("invalidations_found", c.invalidations_found),
        ("free_callbacks_begun", c.free_callbacks_begun),
    ]
}

/// Every field of `struct psim_leak_check`, by name.
pub fn leak_fields(l: &PsimLeakCheck) -> [(&'static str, u64); 5] {
    [
        ("gpu_allocs_live", l.gpu_allocs_live),
        ("pages_pinned", l.pages_pinned),
        ("page_tables_live", l.page_tables_live),
        ("dma_mappings_live", l.dma_mappings_live),
        ("mrs_live", l.mrs_live),
    ]
}

/// Names of the leak-check fields that are not zero.
pub fn leftovers(l: &PsimLeakCheck) -> Vec<(&'static str, u64)> {
    leak_fields(l)
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .collect()
}

/// Balance problems between two counter snapshots taken around a run that
/// ended with everything released: each entry says which pair differs.
/// Registered and deregistered pages are not a pair: from MLNX_OFED 5.5 on
/// the core adds to `num_dereg_pages` the entry count of a table it has
/// just cleared, so it stays 0; the byte counters see the same MRs.
pub fn imbalances(before: &PsimCounters, after: &PsimCounters) -> Vec<String> {
    let d = |a: u64, b: u64| b.wrapping_sub(a);
    let mut out = Vec::new();
    let pairs = [
        (
            "num_alloc_mrs",
            d(before.num_alloc_mrs, after.num_alloc_mrs),
            "num_dealloc_mrs",
            d(before.num_dealloc_mrs, after.num_dealloc_mrs),
        ),
        (
            "num_reg_bytes",
            d(before.num_reg_bytes, after.num_reg_bytes),
            "num_dereg_bytes",
            d(before.num_dereg_bytes, after.num_dereg_bytes),
        ),
    ];
    for (a, av, b, bv) in pairs {
        if av != bv {
            out.push(format!("{a}+{av} != {b}+{bv}"));
        }
    }
    for (name, v) in [
        ("mrs_live", after.mrs_live),
        ("pages_pinned", after.pages_pinned),
        ("page_tables_live", after.page_tables_live),
        ("dma_mappings_live", after.dma_mappings_live),
    ] {
        if v != 0 {
            out.push(format!("{name}={v}"));
        }
    }
    out
}

/// One row of the phase timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseRow {
    pub name: &'static str,
    pub calls: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub last_ns: u64,
    pub max_ns: u64,
}

/// The phase timings as rows, one per phase.
pub fn phase_rows(t: &PsimPhaseTimes) -> Vec<PhaseRow> {
    PSIM_PHASE_NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| PhaseRow {
            name,
            calls: t.calls[i],
            total_ns: t.total_ns[i],
            avg_ns: t.total_ns[i].checked_div(t.calls[i]).unwrap_or(0),
            last_ns: t.last_ns[i],
            max_ns: t.max_ns[i],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_run_has_no_imbalance() {
        let before = PsimCounters {
            num_alloc_mrs: 3,
            num_dealloc_mrs: 3,
            ..Default::default()
        };
        let mut after = before;
        after.num_alloc_mrs += 10;
        after.num_dealloc_mrs += 10;
        after.num_reg_pages += 40;
        after.num_reg_bytes += 40 << 16;
        after.num_dereg_bytes += 40 << 16;
        // the modern core's num_dereg_pages never moves
        assert!(imbalances(&before, &after).is_empty());
        after.num_dereg_bytes -= 1;
        after.mrs_live = 1;
        let i = imbalances(&before, &after);
        assert_eq!(i.len(), 2, "{i:?}");
        assert!(i[0].contains("num_reg_bytes+2621440"));
    }

    #[test]
    fn leftovers_lists_nonzero() {
        let l = PsimLeakCheck {
            pages_pinned: 2,
            mrs_live: 1,
            ..Default::default()
        };
        assert_eq!(leftovers(&l), vec![("pages_pinned", 2), ("mrs_live", 1)]);
        assert!(leftovers(&PsimLeakCheck::default()).is_empty());
    }

    #[test]
    fn phase_average() {
        let mut t = PsimPhaseTimes::default();
        t.calls[1] = 4;
        t.total_ns[1] = 1000;
        let r = phase_rows(&t);
        assert_eq!(r.len(), 8);
        assert_eq!(r[1].name, "get_pages");
        assert_eq!(r[1].avg_ns, 250);
        assert_eq!(r[0].avg_ns, 0);
    }
}
