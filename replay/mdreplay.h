// The input of mdreplay, as mdtrace replay writes it (cmd/mdtrace/replay.go
// keeps the same layout): a header, then one struct md_op per call, in the
// byte order of the machine.
#ifndef MDREPLAY_H
#define MDREPLAY_H

#include <stdint.h>

#define MD_MAGIC "MDRPLAY1"

struct md_header {
	char magic[8];
	// threads is the number of thread indexes the calls use, ids the
	// number of pointer ids.
	uint32_t threads;
	uint32_t pad;
	uint64_t ids;
};

// The kinds of calls: the record types of record_allocs (enum record_type
// in abi/mdtrace_abi.h), and STOP, which mdreplay sends itself.
enum md_op_kind {
	MD_OP_STOP = 0,
	MD_OP_MALLOC = 1,
	MD_OP_CALLOC = 2,
	MD_OP_MEMALIGN = 3,
	MD_OP_REALLOC = 4,
	MD_OP_FREE = 5,
	MD_OP_THREAD_DONE = 6,
	MD_OP_KINDS = 7,
};

#define MD_NO_ID UINT64_MAX
#define MD_NO_THREAD UINT32_MAX

struct md_op {
	uint32_t kind;
	// thread is the index of the recorded thread that made the call.
	uint32_t thread;
	// The call waits until thread dep_thread has made dep_seq calls
	// (MD_NO_THREAD: it waits for nothing).
	uint32_t dep_thread;
	uint32_t pad;
	uint64_t dep_seq;
	// id is the pointer id the call returns (malloc, calloc, memalign,
	// realloc) or frees (free); old_id the pointer realloc is given.
	// MD_NO_ID when there is none.
	uint64_t id;
	uint64_t old_id;
	// size is the size, or calloc's element size; arg is calloc's count
	// or memalign's alignment.
	uint64_t size;
	uint64_t arg;
};

#endif
