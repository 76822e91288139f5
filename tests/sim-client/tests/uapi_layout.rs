// SPDX-License-Identifier: GPL-2.0
//! Cross-checks the Rust mirror against the C header itself: a small C
//! program built with the system C compiler prints every struct size, a few
//! offsets and every ioctl number, and they must equal ours. Skipped (a
//! skip, not a pass, in make test) only when no C compiler is installed.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use peermem_sim::uapi::*;

mod common;

const C_PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <uapi/peermem_sim.h>
#define S(t) printf("sizeof_" #t " %zu\n", sizeof(struct t));
#define O(t, f) printf("offsetof_" #t "_" #f " %zu\n", offsetof(struct t, f));
#define I(n) printf(#n " %lu\n", (unsigned long)(n));
int main(void)
{
	S(psim_gpu_alloc) S(psim_gpu_free) S(psim_gpu_copy) S(psim_mr_reg)
	S(psim_mr_dereg) S(psim_hca_xfer) S(psim_mr_query) S(psim_fault)
	S(psim_delay) S(psim_counters) S(psim_leak_check)
	S(psim_provider_config) S(psim_phase_times) S(psim_release)
	O(psim_mr_reg, client) O(psim_hca_xfer, engine) O(psim_fault, err)
	O(psim_counters, delays_taken) O(psim_phase_times, max_ns)
	O(psim_counters, delays_held) O(psim_counters, free_callbacks_begun)
	O(psim_provider_config, persistent_supported)
	O(psim_provider_config, contiguous_backing)
	I(PSIM_IOC_GPU_ALLOC) I(PSIM_IOC_GPU_FREE) I(PSIM_IOC_GPU_WRITE)
	I(PSIM_IOC_GPU_READ) I(PSIM_IOC_MR_REG) I(PSIM_IOC_MR_DEREG)
	I(PSIM_IOC_MR_QUERY) I(PSIM_IOC_HCA_WRITE) I(PSIM_IOC_HCA_READ)
	I(PSIM_IOC_COUNTERS) I(PSIM_IOC_FAULT) I(PSIM_IOC_DELAY)
	I(PSIM_IOC_LEAK_CHECK) I(PSIM_IOC_PROVIDER_CONFIG)
	I(PSIM_IOC_PHASE_TIMES) I(PSIM_IOC_RELEASE)
	I(PSIM_ACCESS_LOCAL_WRITE) I(PSIM_ACCESS_REMOTE_WRITE)
	I(PSIM_ACCESS_REMOTE_READ) I(PSIM_ENGINE_EDU) I(PSIM_ENGINE_CPU)
	I(PSIM_MR_LIVE) I(PSIM_MR_INVALIDATED) I(PEERMEM_SIM_NAME_MAX)
	I(PSIM_PHASE_COUNT) I(PSIM_PHASE_INVALIDATE)
	return 0;
}
"#;

fn c_values() -> Option<BTreeMap<String, u64>> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../fixtures/include");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join("uapi_layout.c");
    let exe = dir.join("uapi_layout");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let status = match Command::new(&cc)
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
    {
        Ok(s) => s,
        Err(e) => {
            common::skip(
                "rust_mirror_matches_c_header",
                &format!("no C compiler ({cc}): {e}"),
            );
            return None;
        }
    };
    assert!(status.success(), "the C layout probe did not compile");
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect(),
    )
}

#[test]
fn rust_mirror_matches_c_header() {
    let Some(c) = c_values() else { return };
    let ours: Vec<(&str, u64)> = vec![
        ("sizeof_psim_gpu_alloc", size_of::<PsimGpuAlloc>() as u64),
        ("sizeof_psim_gpu_free", size_of::<PsimGpuFree>() as u64),
        ("sizeof_psim_gpu_copy", size_of::<PsimGpuCopy>() as u64),
        ("sizeof_psim_mr_reg", size_of::<PsimMrReg>() as u64),
        ("sizeof_psim_mr_dereg", size_of::<PsimMrDereg>() as u64),
        ("sizeof_psim_hca_xfer", size_of::<PsimHcaXfer>() as u64),
        ("sizeof_psim_mr_query", size_of::<PsimMrQuery>() as u64),
        ("sizeof_psim_fault", size_of::<PsimFault>() as u64),
        ("sizeof_psim_delay", size_of::<PsimDelay>() as u64),
        ("sizeof_psim_counters", size_of::<PsimCounters>() as u64),
        ("sizeof_psim_leak_check", size_of::<PsimLeakCheck>() as u64),
        (
            "sizeof_psim_provider_config",
            size_of::<PsimProviderConfig>() as u64,
        ),
        (
            "sizeof_psim_phase_times",
            size_of::<PsimPhaseTimes>() as u64,
        ),
        ("sizeof_psim_release", size_of::<PsimRelease>() as u64),
        (
            "offsetof_psim_mr_reg_client",
            offset_of!(PsimMrReg, client) as u64,
        ),
        (
            "offsetof_psim_hca_xfer_engine",
            offset_of!(PsimHcaXfer, engine) as u64,
        ),
        ("offsetof_psim_fault_err", offset_of!(PsimFault, err) as u64),
        (
            "offsetof_psim_counters_delays_taken",
            offset_of!(PsimCounters, delays_taken) as u64,
        ),
        (
            "offsetof_psim_counters_delays_held",
            offset_of!(PsimCounters, delays_held) as u64,
        ),
        (
            "offsetof_psim_counters_free_callbacks_begun",
            offset_of!(PsimCounters, free_callbacks_begun) as u64,
        ),
        (
            "offsetof_psim_phase_times_max_ns",
            offset_of!(PsimPhaseTimes, max_ns) as u64,
        ),
        (
            "offsetof_psim_provider_config_persistent_supported",
            offset_of!(PsimProviderConfig, persistent_supported) as u64,
        ),
        (
            "offsetof_psim_provider_config_contiguous_backing",
            offset_of!(PsimProviderConfig, contiguous_backing) as u64,
        ),
        ("PSIM_IOC_GPU_ALLOC", PSIM_IOC_GPU_ALLOC.into()),
        ("PSIM_IOC_GPU_FREE", PSIM_IOC_GPU_FREE.into()),
        ("PSIM_IOC_GPU_WRITE", PSIM_IOC_GPU_WRITE.into()),
        ("PSIM_IOC_GPU_READ", PSIM_IOC_GPU_READ.into()),
        ("PSIM_IOC_MR_REG", PSIM_IOC_MR_REG.into()),
        ("PSIM_IOC_MR_DEREG", PSIM_IOC_MR_DEREG.into()),
        ("PSIM_IOC_MR_QUERY", PSIM_IOC_MR_QUERY.into()),
        ("PSIM_IOC_HCA_WRITE", PSIM_IOC_HCA_WRITE.into()),
        ("PSIM_IOC_HCA_READ", PSIM_IOC_HCA_READ.into()),
        ("PSIM_IOC_COUNTERS", PSIM_IOC_COUNTERS.into()),
        ("PSIM_IOC_FAULT", PSIM_IOC_FAULT.into()),
        ("PSIM_IOC_DELAY", PSIM_IOC_DELAY.into()),
        ("PSIM_IOC_LEAK_CHECK", PSIM_IOC_LEAK_CHECK.into()),
        ("PSIM_IOC_PROVIDER_CONFIG", PSIM_IOC_PROVIDER_CONFIG.into()),
        ("PSIM_IOC_PHASE_TIMES", PSIM_IOC_PHASE_TIMES.into()),
        ("PSIM_IOC_RELEASE", PSIM_IOC_RELEASE.into()),
        ("PSIM_ACCESS_LOCAL_WRITE", PSIM_ACCESS_LOCAL_WRITE.into()),
        ("PSIM_ACCESS_REMOTE_WRITE", PSIM_ACCESS_REMOTE_WRITE.into()),
        ("PSIM_ACCESS_REMOTE_READ", PSIM_ACCESS_REMOTE_READ.into()),
        ("PSIM_ENGINE_EDU", PSIM_ENGINE_EDU.into()),
        ("PSIM_ENGINE_CPU", PSIM_ENGINE_CPU.into()),
        ("PSIM_MR_LIVE", PSIM_MR_LIVE.into()),
        ("PSIM_MR_INVALIDATED", PSIM_MR_INVALIDATED.into()),
        ("PEERMEM_SIM_NAME_MAX", PEERMEM_SIM_NAME_MAX as u64),
        ("PSIM_PHASE_COUNT", PSIM_PHASE_COUNT as u64),
        ("PSIM_PHASE_INVALIDATE", PSIM_PHASE_INVALIDATE as u64),
    ];
    let mut bad = Vec::new();
    for (k, v) in &ours {
        match c.get(*k) {
            Some(cv) if cv == v => {}
            other => bad.push(format!("{k}: rust={v} c={other:?}")),
        }
    }
    assert!(
        bad.is_empty(),
        "uapi mirror drifted from the C header:\n{}",
        bad.join("\n")
    );
    assert_eq!(c.len(), ours.len(), "probe and mirror list different items");
}
