// cxxchain leaks through C++'s operator new at the bottom of a chain of
// member functions, built as distributions build code (-O2, no frame
// pointers): 10 Nodes of 56 bytes, each from Tree::grow, called by
// Tree::build, build_forest and main. It first allocates and frees 1000
// more, so that the leaks are found among others.
//
//   cxxchain [hold]
//
// With "hold" it writes "ready" and waits for a line on standard input
// before it starts, so that mdtrace can attach to it; it writes "done" at
// the end.
#include <cstdio>
#include <cstring>
#include <unistd.h>

struct Node {
	Node *next;
	long key, value[5];
};

class Tree {
      public:
	__attribute__((noinline)) Node *grow(int key)
	{
		Node *n = new Node{head, key, {}};
		head = n;
		return n;
	}
	__attribute__((noinline)) void build(int n)
	{
		for (int i = 0; i < n; i++)
			grow(i);
	}
	__attribute__((noinline)) void clear()
	{
		while (head) {
			Node *n = head;
			head = n->next;
			delete n;
		}
	}
	Node *head = nullptr;
};

static Tree *volatile kept;

__attribute__((noinline)) static void build_forest()
{
	Tree *churn = new Tree;
	churn->build(1000);
	churn->clear();
	delete churn;
	kept = new Tree;
	kept->build(10);
	// Not a tail call: build_forest keeps its frame.
	kept->head->value[0] = 1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && std::strcmp(argv[1], "hold") == 0) {
		char line[16];
		write(1, "ready\n", 6);
		if (read(0, line, sizeof(line)) < 0)
			return 1;
	}
	build_forest();
	std::puts("done");
	return 0;
}
