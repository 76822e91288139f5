// SPDX-License-Identifier: GPL-2.0
/*
 * The same C helpers, compiled a second time for the KUnit test module
 * (Kbuild refuses one object in two modules).
 */
#include "shim.c"
