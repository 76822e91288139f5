// SPDX-License-Identifier: GPL-2.0

//! Compile-time pins of the C ABI: the size and every field offset of each
//! structure in `shared/CONTRACT.md` (x86_64), checked against whatever
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

pin_layout!(sys::nvidia_p2p_page_table, size 32, {
    version @ 0,
    page_size @ 4,
    pages @ 8,
    entries @ 16,
    gpu_uuid @ 24,
});

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
    assert!(sys::NVIDIA_P2P_PAGE_TABLE_VERSION == 0x0001_0002);
    assert!(sys::NVIDIA_P2P_DMA_MAPPING_VERSION == 0x0002_0003);
    assert!(sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_4KB == 0);
    assert!(sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB == 1);
    assert!(sys::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_128KB == 2);
};
