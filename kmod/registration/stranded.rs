// SPDX-License-Identifier: GPL-2.0

//! Persistent pins of acquire that it refused and could not unpin.
//!
//! acquire pins, and unpins at once a pin it cannot use (a page table
//! version, page size or page count this module does not take). When that
//! unpin fails, the answer is "not mine", as NVIDIA's acquire answers when
//! its probe's unpin fails, so no registration exists whose release could
//! retry it. A persistent pin has no free callback: nothing but a put ends
//! it (NVIDIA's module forgets it, and the driver keeps the memory pinned).
//! It is kept here instead, still counted in debugfs `pinned_pages`, and
//! unpinned again when the module unloads; if that fails too, it is left to
//! the driver with one line. (An invalidating pin stays with its
//! registration, whose free callback owns it: the memory's free ends that
//! pin, see `Registration::acquire`.)
//!
//! A lock-free stack: [`keep`] pushes from acquire, [`drain`] takes it whole.

use super::Registration;
use crate::p2p::PageTable;
use crate::stats::{ErrorKind, STATS};
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::prelude::*;

/// One kept pin.
struct Node {
    page_table: PageTable<Registration>,
    next: *mut Node,
}

/// The kept pins, newest first.
///
/// # Invariants
///
/// Null, or a `Node` from `KBox::into_raw` whose `next` is the same, each
/// owned by the stack alone.
static HEAD: AtomicPtr<Node> = AtomicPtr::new(ptr::null_mut());

/// Keeps `page_table`, a persistent pin (no free callback) whose unpin
/// failed, until [`drain`].
pub(crate) fn keep(page_table: PageTable<Registration>) {
    let range = page_table.range();
    let Ok(slot) = KBox::<Node>::new_uninit(GFP_KERNEL) else {
        pr_err!(
            "[{:#x}, {:#x}): no memory to keep acquire's pin: left pinned in the driver\n",
            range.start(),
            range.end()
        );
        core::mem::forget(page_table);
        return;
    };
    let node = KBox::into_raw(KBox::write(
        slot,
        Node {
            page_table,
            next: ptr::null_mut(),
        },
    ));
    let mut head = HEAD.load(Ordering::Relaxed);
    loop {
        // SAFETY: `node` is ours alone until the exchange below publishes it.
        unsafe { (*node).next = head };
        // INVARIANT: `node` came from `KBox::into_raw`, its `next` is the old
        // head; the release ordering publishes both.
        match HEAD.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => head = now,
        }
    }
}

/// Unpins every kept pin. At unload, once no client is registered (nothing
/// can [`keep`] any more); a pin the driver still refuses is left to it.
pub(crate) fn drain() {
    let mut node = HEAD.swap(ptr::null_mut(), Ordering::Acquire);
    while !node.is_null() {
        // SAFETY: by the type invariant `node` came from `KBox::into_raw`,
        // and the swap above took the whole stack: nobody else has it.
        let Node { page_table, next } = KBox::into_inner(unsafe { KBox::from_raw(node) });
        node = next;
        let range = page_table.range();
        match page_table.unpin() {
            // No free callback: nothing to take back.
            Ok(unpinned) => drop(unpinned),
            Err((page_table, e)) => {
                STATS.error(ErrorKind::PutPages);
                pr_err!(
                    "[{:#x}, {:#x}): unpinning acquire's pin failed again ({:?}): left pinned in the driver\n",
                    range.start(),
                    range.end(),
                    e
                );
                core::mem::forget(page_table);
            }
        }
    }
}

/// Drains the kept pins when dropped: held by the loaded module, dropped
/// after its clients are unregistered.
pub(crate) struct Stash;

impl Drop for Stash {
    fn drop(&mut self) {
        drain();
    }
}
