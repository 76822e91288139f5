// SPDX-License-Identifier: GPL-2.0

//! Compiles where `impl_list_item!` names the `ListLinks` field itself.

use kernel::list::ListLinks;

#[allow(dead_code)]
struct Probe {
    links: ListLinks<0>,
}

kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for Probe { untracked; }
}

kernel::list::impl_list_item! {
    impl ListItem<0> for Probe { using ListLinks { self.links }; }
}
