/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types and constants mdtrace's BPF programs use, for
 * x86-64. Defining __VMLINUX_H__ makes bpf_tracing.h use the kernel's
 * struct pt_regs field names.
 */
#ifndef __MDTRACE_TYPES_H__
#define __MDTRACE_TYPES_H__
#define __VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

/* The x86-64 kernel's register frame, as uprobe programs see it. */
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax;
	unsigned long ip, cs, flags, sp, ss;
};

struct task_struct;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

enum {
	BPF_F_NO_PREALLOC = (1U << 0),
	BPF_F_MMAPABLE = (1U << 10),
	BPF_F_INNER_MAP = (1U << 12),
};

enum {
	BPF_F_USER_STACK = (1ULL << 8),
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = (1ULL << 0),
};

enum {
	BPF_RB_NO_WAKEUP = (1ULL << 0),
	BPF_RB_FORCE_WAKEUP = (1ULL << 1),
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

#endif /* __MDTRACE_TYPES_H__ */
