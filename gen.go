package mdtrace

//go:generate go tool bpf2go -go-package bpf -output-dir bpf -output-stem mdtrace -type alloc_info -type alloc_key -type batch_thread -type kept_free -type unwind_entry -type unwind_proc -type unwind_file -target amd64 -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" Mdtrace bpf/mdtrace.bpf.c
//go:generate go tool bpf2go -go-package bpf -output-dir bpf -output-stem empty -target amd64 -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" Empty bpf/empty.bpf.c
//go:generate go tool bpf2go -go-package bpf -output-dir bpf -output-stem signals -target amd64 -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" Signals bpf/signals.bpf.c
