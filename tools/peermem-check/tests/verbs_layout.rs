// SPDX-License-Identifier: GPL-2.0
//! The verbs layouts peermem-check relies on, compared with the system's
//! `<infiniband/verbs.h>` as a C compiler sees it.
//!
//! The tool takes its verbs types from rdma-sys. Most are bindgen output of
//! this very header, but rdma-sys writes a few by hand (`ibv_wc`,
//! `ibv_send_wr`, `ibv_ah_attr`, `ibv_global_route`, `ibv_gid`: their
//! unions), the header's inline `ibv_post_send`/`ibv_poll_cq` are rdma-sys
//! Rust code reading the context's ops table, and `IBV_LINK_LAYER_ETHERNET`
//! (an anonymous enum rdma-sys does not bind) is the tool's own constant.
//! A probe compiled against the header prints every size, offset and
//! constant the tool uses; each must equal rdma-sys's.
#![cfg(feature = "real")]

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

use rdma_sys::*;

// One copy for the workspace: the test bed's crate keeps it.
#[path = "../../../tests/sim-client/tests/common/mod.rs"]
mod common;

const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <infiniband/verbs.h>
#define S(t) printf("sizeof_" #t " %zu\n", sizeof(t));
#define O(t, f) printf("offsetof_" #t "_" #f " %zu\n", offsetof(t, f));
#define V(n) printf(#n " %ld\n", (long)(n));
int main(void)
{
	S(struct ibv_wc) S(struct ibv_send_wr) S(struct ibv_sge)
	S(struct ibv_ah_attr) S(struct ibv_global_route) S(union ibv_gid)
	S(struct ibv_qp_attr) S(struct ibv_qp_init_attr) S(struct ibv_qp_cap)
	S(struct ibv_mr) S(struct ibv_port_attr)
	O(struct ibv_wc, status) O(struct ibv_wc, vendor_err) O(struct ibv_wc, qp_num)
	O(struct ibv_wc, wc_flags) O(struct ibv_wc, dlid_path_bits)
	O(struct ibv_send_wr, sg_list) O(struct ibv_send_wr, num_sge)
	O(struct ibv_send_wr, opcode) O(struct ibv_send_wr, send_flags)
	O(struct ibv_send_wr, wr.rdma.remote_addr) O(struct ibv_send_wr, wr.rdma.rkey)
	O(struct ibv_send_wr, qp_type) O(struct ibv_ah_attr, dlid)
	O(struct ibv_ah_attr, is_global) O(struct ibv_ah_attr, port_num)
	O(struct ibv_global_route, sgid_index) O(struct ibv_global_route, hop_limit)
	O(struct ibv_qp_attr, ah_attr) O(struct ibv_qp_attr, dest_qp_num)
	O(struct ibv_qp_attr, port_num) O(struct ibv_qp_attr, rnr_retry)
	O(struct ibv_port_attr, link_layer) O(struct ibv_port_attr, max_msg_sz)
	O(struct ibv_context, ops.poll_cq) O(struct ibv_context, ops.post_send)
	O(struct ibv_qp, context) O(struct ibv_qp, qp_num) O(struct ibv_cq, context)
	O(struct ibv_mr, lkey) O(struct ibv_mr, rkey)
	V(IBV_ACCESS_LOCAL_WRITE) V(IBV_ACCESS_REMOTE_WRITE) V(IBV_ACCESS_REMOTE_READ)
	V(IBV_QPT_RC) V(IBV_QPS_RESET) V(IBV_QPS_INIT) V(IBV_QPS_RTR) V(IBV_QPS_RTS)
	V(IBV_QP_STATE) V(IBV_QP_AV) V(IBV_QP_MAX_DEST_RD_ATOMIC) V(IBV_QP_DEST_QPN)
	V(IBV_WR_RDMA_WRITE) V(IBV_WR_RDMA_READ) V(IBV_SEND_SIGNALED)
	V(IBV_WC_SUCCESS) V(IBV_WC_REM_ACCESS_ERR) V(IBV_PORT_ACTIVE)
	V(IBV_LINK_LAYER_ETHERNET)
	return 0;
}
"#;

/// Compiles and runs the probe. `None` (and a message) without a C
/// compiler; the header itself is there, or rdma-sys would not have built.
fn header_values() -> Option<BTreeMap<String, i64>> {
    let dir = std::env::temp_dir().join(format!("verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, PROBE).unwrap();
    let st = match Command::new("cc")
        .args(["-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
    {
        Ok(s) => s,
        Err(e) => {
            common::skip(
                "rdma_sys_layouts_match_the_system_header",
                &format!("no C compiler (cc): {e}"),
            );
            return None;
        }
    };
    assert!(st.success(), "the verbs layout probe did not compile");
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect(),
    )
}

fn n(v: usize) -> i64 {
    v as i64
}

#[test]
fn rdma_sys_layouts_match_the_system_header() {
    let Some(c) = header_values() else { return };
    let ours: Vec<(&str, i64)> = vec![
        ("sizeof_struct ibv_wc", n(size_of::<ibv_wc>())),
        ("sizeof_struct ibv_send_wr", n(size_of::<ibv_send_wr>())),
        ("sizeof_struct ibv_sge", n(size_of::<ibv_sge>())),
        ("sizeof_struct ibv_ah_attr", n(size_of::<ibv_ah_attr>())),
        (
            "sizeof_struct ibv_global_route",
            n(size_of::<ibv_global_route>()),
        ),
        ("sizeof_union ibv_gid", n(size_of::<ibv_gid>())),
        ("sizeof_struct ibv_qp_attr", n(size_of::<ibv_qp_attr>())),
        (
            "sizeof_struct ibv_qp_init_attr",
            n(size_of::<ibv_qp_init_attr>()),
        ),
        ("sizeof_struct ibv_qp_cap", n(size_of::<ibv_qp_cap>())),
        ("sizeof_struct ibv_mr", n(size_of::<ibv_mr>())),
        ("sizeof_struct ibv_port_attr", n(size_of::<ibv_port_attr>())),
        (
            "offsetof_struct ibv_wc_status",
            n(offset_of!(ibv_wc, status)),
        ),
        (
            "offsetof_struct ibv_wc_vendor_err",
            n(offset_of!(ibv_wc, vendor_err)),
        ),
        (
            "offsetof_struct ibv_wc_qp_num",
            n(offset_of!(ibv_wc, qp_num)),
        ),
        (
            "offsetof_struct ibv_wc_wc_flags",
            n(offset_of!(ibv_wc, wc_flags)),
        ),
        (
            "offsetof_struct ibv_wc_dlid_path_bits",
            n(offset_of!(ibv_wc, dlid_path_bits)),
        ),
        (
            "offsetof_struct ibv_send_wr_sg_list",
            n(offset_of!(ibv_send_wr, sg_list)),
        ),
        (
            "offsetof_struct ibv_send_wr_num_sge",
            n(offset_of!(ibv_send_wr, num_sge)),
        ),
        (
            "offsetof_struct ibv_send_wr_opcode",
            n(offset_of!(ibv_send_wr, opcode)),
        ),
        (
            "offsetof_struct ibv_send_wr_send_flags",
            n(offset_of!(ibv_send_wr, send_flags)),
        ),
        (
            "offsetof_struct ibv_send_wr_wr.rdma.remote_addr",
            n(offset_of!(ibv_send_wr, wr) + offset_of!(rdma_t, remote_addr)),
        ),
        (
            "offsetof_struct ibv_send_wr_wr.rdma.rkey",
            n(offset_of!(ibv_send_wr, wr) + offset_of!(rdma_t, rkey)),
        ),
        (
            "offsetof_struct ibv_send_wr_qp_type",
            n(offset_of!(ibv_send_wr, qp_type)),
        ),
        (
            "offsetof_struct ibv_ah_attr_dlid",
            n(offset_of!(ibv_ah_attr, dlid)),
        ),
        (
            "offsetof_struct ibv_ah_attr_is_global",
            n(offset_of!(ibv_ah_attr, is_global)),
        ),
        (
            "offsetof_struct ibv_ah_attr_port_num",
            n(offset_of!(ibv_ah_attr, port_num)),
        ),
        (
            "offsetof_struct ibv_global_route_sgid_index",
            n(offset_of!(ibv_global_route, sgid_index)),
        ),
        (
            "offsetof_struct ibv_global_route_hop_limit",
            n(offset_of!(ibv_global_route, hop_limit)),
        ),
        (
            "offsetof_struct ibv_qp_attr_ah_attr",
            n(offset_of!(ibv_qp_attr, ah_attr)),
        ),
        (
            "offsetof_struct ibv_qp_attr_dest_qp_num",
            n(offset_of!(ibv_qp_attr, dest_qp_num)),
        ),
        (
            "offsetof_struct ibv_qp_attr_port_num",
            n(offset_of!(ibv_qp_attr, port_num)),
        ),
        (
            "offsetof_struct ibv_qp_attr_rnr_retry",
            n(offset_of!(ibv_qp_attr, rnr_retry)),
        ),
        (
            "offsetof_struct ibv_port_attr_link_layer",
            n(offset_of!(ibv_port_attr, link_layer)),
        ),
        (
            "offsetof_struct ibv_port_attr_max_msg_sz",
            n(offset_of!(ibv_port_attr, max_msg_sz)),
        ),
        (
            "offsetof_struct ibv_context_ops.poll_cq",
            n(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, poll_cq)),
        ),
        (
            "offsetof_struct ibv_context_ops.post_send",
            n(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_send)),
        ),
        (
            "offsetof_struct ibv_qp_context",
            n(offset_of!(ibv_qp, context)),
        ),
        (
            "offsetof_struct ibv_qp_qp_num",
            n(offset_of!(ibv_qp, qp_num)),
        ),
        (
            "offsetof_struct ibv_cq_context",
            n(offset_of!(ibv_cq, context)),
        ),
        ("offsetof_struct ibv_mr_lkey", n(offset_of!(ibv_mr, lkey))),
        ("offsetof_struct ibv_mr_rkey", n(offset_of!(ibv_mr, rkey))),
        (
            "IBV_ACCESS_LOCAL_WRITE",
            i64::from(ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0),
        ),
        (
            "IBV_ACCESS_REMOTE_WRITE",
            i64::from(ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0),
        ),
        (
            "IBV_ACCESS_REMOTE_READ",
            i64::from(ibv_access_flags::IBV_ACCESS_REMOTE_READ.0),
        ),
        ("IBV_QPT_RC", i64::from(ibv_qp_type::IBV_QPT_RC)),
        ("IBV_QPS_RESET", i64::from(ibv_qp_state::IBV_QPS_RESET)),
        ("IBV_QPS_INIT", i64::from(ibv_qp_state::IBV_QPS_INIT)),
        ("IBV_QPS_RTR", i64::from(ibv_qp_state::IBV_QPS_RTR)),
        ("IBV_QPS_RTS", i64::from(ibv_qp_state::IBV_QPS_RTS)),
        ("IBV_QP_STATE", i64::from(ibv_qp_attr_mask::IBV_QP_STATE.0)),
        ("IBV_QP_AV", i64::from(ibv_qp_attr_mask::IBV_QP_AV.0)),
        (
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            i64::from(ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0),
        ),
        (
            "IBV_QP_DEST_QPN",
            i64::from(ibv_qp_attr_mask::IBV_QP_DEST_QPN.0),
        ),
        (
            "IBV_WR_RDMA_WRITE",
            i64::from(ibv_wr_opcode::IBV_WR_RDMA_WRITE),
        ),
        (
            "IBV_WR_RDMA_READ",
            i64::from(ibv_wr_opcode::IBV_WR_RDMA_READ),
        ),
        (
            "IBV_SEND_SIGNALED",
            i64::from(ibv_send_flags::IBV_SEND_SIGNALED.0),
        ),
        ("IBV_WC_SUCCESS", i64::from(ibv_wc_status::IBV_WC_SUCCESS)),
        (
            "IBV_WC_REM_ACCESS_ERR",
            i64::from(ibv_wc_status::IBV_WC_REM_ACCESS_ERR),
        ),
        (
            "IBV_PORT_ACTIVE",
            i64::from(ibv_port_state::IBV_PORT_ACTIVE),
        ),
        // src/real/verbs.rs LINK_LAYER_ETHERNET
        ("IBV_LINK_LAYER_ETHERNET", 2),
    ];
    let mut bad = Vec::new();
    for (k, v) in &ours {
        match c.get(*k) {
            Some(cv) if cv == v => {}
            other => bad.push(format!("{k}: rdma-sys={v} verbs.h={other:?}")),
        }
    }
    assert!(
        bad.is_empty(),
        "rdma-sys differs from this system's verbs.h:\n{}",
        bad.join("\n")
    );
    assert_eq!(c.len(), ours.len(), "a probe line without a Rust value");
}
