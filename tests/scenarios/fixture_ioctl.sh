#!/bin/sh
# Bad arguments to /dev/peermem_sim get clean errors (and no splat).
. /scenarios/lib.sh
. /scenarios/fixture_lib.sh
load_sim_stack generation="${arg_generation:-modern}"
load_refclient
st_errno EINVAL gpu-alloc 0
st_errno EINVAL gpu-alloc 4096G
st_errno ENOMEM gpu-alloc 1G
st_errno EINVAL gpu-free 0x1234
st_errno EINVAL gpu-check 0x1000 16 seq
va=$(gpu_alloc 64K)
st_errno EINVAL gpu-free $((va + 4096))
st_errno EINVAL gpu-check "$va" 65537 seq
st_errno EINVAL gpu-check $((va + 65535)) 2 seq
st_errno EINVAL mr-reg "$va" 0
st_errno EINVAL mr-reg 0xffffffffffffff00 0x1000
st_errno ENOENT mr-dereg 0
st_errno ENOENT mr-dereg 12345
st_errno ENOENT mr-dereg 0x100000000
st_errno ENOENT mr-query 77
st_errno ENOENT hca-write 77 0 16 seq cpu
mr_reg "$va" 4096
st_errno EINVAL hca-write "$mr_id" 4096 1 seq cpu
st_errno EINVAL hca-write "$mr_id" 4000 100 seq cpu
st_errno EINVAL hca-write "$mr_id" 0xffffffffffffff00 0x200 seq cpu
st mr-dereg "$mr_id" >/dev/null
st_errno ENOENT mr-dereg "$mr_id"
st gpu-free "$va" >/dev/null
st_errno EINVAL gpu-free "$va"
no_leaks
teardown
pass
