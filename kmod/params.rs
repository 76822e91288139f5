// SPDX-License-Identifier: GPL-2.0

//! Module parameters, declared by hand in the layout of C's
//! `module_param(name, int, 0444)`, and their validation into a typed
//! [`Config`].
//!
//! One implementation for every kernel. 6.12's `module!` has no
//! parameters. 7.x's has (`params: { name: i32 { default, description } }`,
//! `kernel::module_param`), but it cannot give what users and tests see of
//! ours, so it is not used there either:
//!
//! - its `kernel_param` has `perm: 0`, fixed in the macro: no file under
//!   `/sys/module/<name>/parameters/`, where ours are 0444 as NVIDIA's
//!   are, and read: `peermem-check doctor` compares `peerdirect_support`
//!   with the core, and tells the drop-in from NVIDIA's module by
//!   `parameters/coalesce_sg`;
//! - `parmtype` is the Rust type's name (`coalesce_sg:i32`), so `modinfo`
//!   says `(i32)` where NVIDIA's module and ours say `(int)`;
//! - its setter takes a value once (a second `name=` on the command line
//!   fails the load with `EEXIST`), where C's `param_ops_int`, which ours
//!   use, takes the last.
//!
//! (Both names of the drop-in build would have been no obstacle: the
//! parameters would be given in both `peermem_module!` invocations of the
//! crate root.) The validation below is common to both kernels either way.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h)

use core::cell::UnsafeCell;
use kernel::{bindings, ffi, prelude::*};

/// Storage of an `int` module parameter.
///
/// # Invariants
///
/// The value is written only by the module loader's `parse_args()` before
/// `init_module` runs: every parameter is read-only in sysfs (0444).
#[repr(transparent)]
pub(crate) struct IntParam(UnsafeCell<ffi::c_int>);

// SAFETY: by the type invariant there is no writer once the module's code can
// run, so shared reads from any thread are fine.
unsafe impl Sync for IntParam {}

impl IntParam {
    const fn new(default: ffi::c_int) -> Self {
        Self(UnsafeCell::new(default))
    }

    /// The value given at load time (or the default).
    pub(crate) fn get(&self) -> i32 {
        // SAFETY: by the type invariant nothing writes the value any more.
        unsafe { *self.0.get() }
    }
}

/// A `struct kernel_param` placed in the `__param` section.
#[repr(transparent)]
struct KernelParam(bindings::kernel_param);

// SAFETY: only the module loader and sysfs read it (under `kernel_param_lock`),
// and nothing writes it.
unsafe impl Sync for KernelParam {}

/// Declares a read-only (0444) `int` parameter with its `parm` and
/// `parmtype` modinfo strings.
macro_rules! int_param {
    ($storage:ident, $name:literal, $default:expr, $desc:literal) => {
        pub(crate) static $storage: IntParam = IntParam::new($default);

        const _: () = {
            #[link_section = "__param"]
            #[used(compiler)]
            static PARAM: KernelParam = KernelParam(bindings::kernel_param {
                name: concat!($name, "\0").as_ptr(),
                mod_: crate::THIS_MODULE.as_ptr(),
                ops: &raw const bindings::param_ops_int,
                perm: 0o444,
                level: -1,
                flags: 0,
                __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 {
                    arg: $storage.0.get().cast(),
                },
            });

            const PARMTYPE: &str = concat!("parmtype=", $name, ":int\0");
            #[link_section = ".modinfo"]
            #[used(compiler)]
            static MODINFO_PARMTYPE: [u8; PARMTYPE.len()] = crate::modinfo::modinfo_bytes(PARMTYPE);

            const PARM: &str = concat!("parm=", $name, ":", $desc, "\0");
            #[link_section = ".modinfo"]
            #[used(compiler)]
            static MODINFO_PARM: [u8; PARM.len()] = crate::modinfo::modinfo_bytes(PARM);
        };
    };
}

int_param!(
    PEERDIRECT_SUPPORT,
    "peerdirect_support",
    0,
    "PeerDirect ABI of the invalidating nv_mem (persistent_api_support=0): 0 = extended client with PEER_MEM_INVALIDATE_UNMAPS (MLNX_OFED 5.1+, default), 1 = legacy ABI (MLNX_OFED 5.0 and older); persistent clients are plain in both"
);
int_param!(
    PERSISTENT_API_SUPPORT,
    "persistent_api_support",
    1,
    "1 = one persistent client nv_mem (default, as driver R560+), 0 = invalidating nv_mem plus persistent nv_mem_nc"
);
int_param!(
    COALESCE_SG,
    "coalesce_sg",
    0,
    "1 = merge physically contiguous GPU pages into fewer SG entries, 0 = one SG entry per GPU page (default)"
);

/// Which PeerDirect ABI the invalidating client's table follows
/// (`peerdirect_support`). Persistent clients are plain in both, as
/// NVIDIA's ([`crate::client`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PeerDirectAbi {
    /// `peer_memory_client_ex` with `PEER_MEM_INVALIDATE_UNMAPS` (value 0).
    Extended,
    /// The legacy layout: `ex_size` and `flags` zero (value 1).
    Legacy,
}

/// Which clients register with the core (`persistent_api_support`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ClientSet {
    /// One persistent client named `nv_mem` (value 1).
    PersistentOnly,
    /// An invalidating `nv_mem` and a persistent `nv_mem_nc` (value 0).
    InvalidatingAndPersistent,
}

/// The validated configuration of the module.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Config {
    pub(crate) abi: PeerDirectAbi,
    pub(crate) clients: ClientSet,
    pub(crate) coalesce_sg: bool,
}

/// A parameter value out of range.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct InvalidParam {
    /// Name of the parameter.
    pub(crate) name: &'static str,
    /// The value given.
    pub(crate) value: i32,
    /// The accepted values, in words.
    pub(crate) valid: &'static str,
}

const PEERDIRECT_VALID: &str =
    "0 (extended client with PEER_MEM_INVALIDATE_UNMAPS), 1 (legacy PeerDirect ABI)";
const PERSISTENT_VALID: &str =
    "0 (invalidating nv_mem + persistent nv_mem_nc), 1 (persistent nv_mem only)";
const COALESCE_VALID: &str = "0 (one SG entry per GPU page), 1 (coalesce contiguous pages)";

impl Config {
    /// Validates raw parameter values.
    pub(crate) fn from_values(
        peerdirect_support: i32,
        persistent_api_support: i32,
        coalesce_sg: i32,
    ) -> core::result::Result<Self, InvalidParam> {
        let abi = match peerdirect_support {
            0 => PeerDirectAbi::Extended,
            1 => PeerDirectAbi::Legacy,
            value => {
                return Err(InvalidParam {
                    name: "peerdirect_support",
                    value,
                    valid: PEERDIRECT_VALID,
                })
            }
        };
        let clients = match persistent_api_support {
            0 => ClientSet::InvalidatingAndPersistent,
            1 => ClientSet::PersistentOnly,
            value => {
                return Err(InvalidParam {
                    name: "persistent_api_support",
                    value,
                    valid: PERSISTENT_VALID,
                })
            }
        };
        let coalesce_sg = match coalesce_sg {
            0 => false,
            1 => true,
            value => {
                return Err(InvalidParam {
                    name: "coalesce_sg",
                    value,
                    valid: COALESCE_VALID,
                })
            }
        };
        Ok(Self {
            abi,
            clients,
            coalesce_sg,
        })
    }

    /// Validates the values given at load time; logs one line and returns
    /// `EINVAL` for a value out of range.
    pub(crate) fn from_params() -> Result<Self> {
        Self::from_values(
            PEERDIRECT_SUPPORT.get(),
            PERSISTENT_API_SUPPORT.get(),
            COALESCE_SG.get(),
        )
        .map_err(|e| {
            pr_err!(
                "invalid {}={}: valid values are {}\n",
                e.name,
                e.value,
                e.valid
            );
            EINVAL
        })
    }
}

/// Whether `dma_map` coalesces DMA-contiguous pages (`coalesce_sg`, checked
/// at load time).
pub(crate) fn coalesce_sg() -> bool {
    COALESCE_SG.get() == 1
}
