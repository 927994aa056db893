// Package unreach finds the live blocks of a process that nothing points to,
// as Android's libmemunreachable does: from the roots (the registers of
// every thread, each thread's stack from its stack pointer up, the globals:
// writable data of every file mapped and anonymous memory that holds no
// heap block), it marks every block a root word points into (anywhere in
// the block: interior pointers count), and every block a marked block
// points into, and so on. The blocks left are unreachable: the program can
// never free them. Related leaks are folded (a block that only other
// unreachable blocks point to is counted under them) and leaks with the
// same backtrace merged, as libmemunreachable reports them.
//
// The package needs no kernel: it works on a copy of the process's memory
// (Image), which tracer takes while the process is stopped. Classify picks
// the roots and the heap from the process's maps.
package unreach
