// SPDX-License-Identifier: GPL-2.0

//! Compile-time pins of the C ABI: the size and every field offset of each
//! structure in `docs/contract.md` (x86_64), checked against whatever
//! headers bindgen read (ours, or OFED's / NVIDIA's when given). A mismatch
//! fails the build instead of corrupting memory at run time.

use crate::sys;
use core::mem::{offset_of, size_of};

macro_rules! pin_layout {
    ($ty:ty, size $size:expr, { $($field:ident @ $off:expr),* $(,)? }) => {
        const _: () = {
            assert!(size_of::<$ty>() == $size, concat!("size of ", stringify!($ty)));
            $(
                assert!(
                    offset_of!($ty, $field) == $off,
                    concat!("offset of ", stringify!($ty), ".", stringify!($field))
                );
            )*
        };
    };
}

// PeerDirect core, `rdma/peer_mem.h` (a legacy OFED header, whose
// `peer_memory_client` has the two private-data pointers inside, fails here:
// build with the bundled headers and load with peerdirect_support=1).
pin_layout!(sys::peer_memory_client, size 136, {
    name @ 0,
    version @ 64,
    acquire @ 80,
    get_pages @ 88,
    dma_map @ 96,
    dma_unmap @ 104,
    put_pages @ 112,
    get_page_size @ 120,
    release @ 128,
});

pin_layout!(sys::peer_memory_client_ex, size 152, {
    client @ 0,
    ex_size @ 136,
    flags @ 144,
});

// NVIDIA P2P API, `nv-p2p.h`.
pin_layout!(sys::nvidia_p2p_page, size 32, {
    physical_address @ 0,
    registers @ 8,
});

// Both layouts share the first 32 bytes; version 0x00020000 (580.65.06 on)
// adds `flags` right after them. A header of either generation builds; the
// flags word is read through `p2p::PAGE_TABLE_FLAGS_OFFSET`, never as a
// field, so an older NVIDIA_SRC header (no `flags`) still compiles.
const _: () = {
    use sys::nvidia_p2p_page_table as Pt;
    assert!(offset_of!(Pt, version) == 0);
    assert!(offset_of!(Pt, page_size) == 4);
    assert!(offset_of!(Pt, pages) == 8);
    assert!(offset_of!(Pt, entries) == 16);
    assert!(offset_of!(Pt, gpu_uuid) == 24);
    assert!(offset_of!(Pt, gpu_uuid) + size_of::<*mut u8>() == crate::p2p::PAGE_TABLE_FLAGS_OFFSET);
    // 32 bytes (version 1 header) or 40 (version 2 header, with flags).
    assert!(size_of::<Pt>() == 32 || size_of::<Pt>() == 40);
    assert!(crate::p2p::PAGE_TABLE_FLAGS_OFFSET + size_of::<u32>() <= 40);
};

pin_layout!(sys::nvidia_p2p_dma_mapping, size 40, {
    version @ 0,
    page_size_type @ 4,
    entries @ 8,
    dma_addresses @ 16,
    private @ 24,
    pci_dev @ 32,
});

const _: () = {
    assert!(sys::IB_PEER_MEMORY_NAME_MAX == 64);
    assert!(sys::IB_PEER_MEMORY_VER_MAX == 16);
    assert!(sys::PEER_MEM_INVALIDATE_UNMAPS == 1);
    assert!(sys::NVIDIA_P2P_DMA_MAPPING_VERSION == 0x0002_0003);
    assert!(sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_4KB == 0);
    assert!(sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB == 1);
    assert!(sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_128KB == 2);
};
