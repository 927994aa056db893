package dumps

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Node is a function in a tree of the dump's backtraces: the bytes and
// allocations of the backtraces that go through it by the path from the
// root, and the functions next to it on those paths.
type Node struct {
	// Name is the function, demangled, or the file and offset of a frame
	// that has none; Lib is the frame's file.
	Name, Lib     string
	Bytes, Allocs uint64
	// Children are the most bytes first.
	Children []*Node
	index    map[nodeKey]*Node
}

type nodeKey struct{ name, lib string }

// CallerTree returns the dump's backtraces as a tree from the outermost
// caller (_start, a thread's start) down to the function that allocated:
// a flame graph's layout. The root, "all", holds the dump's totals.
func CallerTree(d *Dump) *Node { return tree(d, true) }

// CalleeTree returns the dump's backtraces as a tree from the function
// that allocated up to its callers, outermost last: where the bytes are
// allocated first, then who asks for them.
func CalleeTree(d *Dump) *Node { return tree(d, false) }

func tree(d *Dump, outermostFirst bool) *Node {
	root := &Node{Name: "all"}
	for _, s := range d.Sites {
		root.Bytes += s.Bytes
		root.Allocs += s.Allocs
		n := root
		if len(s.Frames) == 0 {
			n = n.child("[no backtrace]", "")
			n.Bytes += s.Bytes
			n.Allocs += s.Allocs
			continue
		}
		for i := range s.Frames {
			fr := s.Frames[i]
			if outermostFirst {
				fr = s.Frames[len(s.Frames)-1-i]
			}
			n = n.child(frameName(fr), fr.MapName)
			n.Bytes += s.Bytes
			n.Allocs += s.Allocs
		}
	}
	root.sort()
	return root
}

func (n *Node) child(name, lib string) *Node {
	k := nodeKey{name, lib}
	c := n.index[k]
	if c == nil {
		if n.index == nil {
			n.index = map[nodeKey]*Node{}
		}
		c = &Node{Name: name, Lib: lib}
		n.index[k] = c
		n.Children = append(n.Children, c)
	}
	return c
}

// sort orders each node's children, the most bytes first, then the most
// allocations, then by name, so that a tree is written the same way each
// time.
func (n *Node) sort() {
	n.index = nil
	slices.SortFunc(n.Children, func(a, b *Node) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Allocs, a.Allocs); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Lib, b.Lib)
	})
	for _, c := range n.Children {
		c.sort()
	}
}

// Depth is the number of levels of the tree below n.
func (n *Node) Depth() int {
	d := 0
	for _, c := range n.Children {
		d = max(d, 1+c.Depth())
	}
	return d
}

// WriteTree writes the dump's totals, then its backtraces as a tree, one
// function a line, indented under the one before it on the path: by
// caller (CallerTree), from _start down to the functions that allocate,
// or by callee (CalleeTree), from the functions that allocate up to
// their callers. Of a node's children, those under minPercent of the
// dump's bytes each are left out, and added up on one line.
func WriteTree(w io.Writer, d *Dump, byCallee bool, minPercent float64) error {
	bw := bufio.NewWriter(w)
	writeTotals(bw, d)
	root := CallerTree(d)
	if byCallee {
		root = CalleeTree(d)
		bw.WriteString("\nAllocations by callee: each function that allocates, then the functions that called it, indented below it")
	} else {
		bw.WriteString("\nAllocations by caller: the outermost functions, then the functions they called, indented below them")
	}
	if minPercent > 0 {
		fmt.Fprintf(bw, " (those under %g%% of the bytes each added up on one line)", minPercent)
	}
	bw.WriteString(":\n")
	fmt.Fprintf(bw, "%12s %7s %9s  %s\n", "BYTES", "", "ALLOCS", "FUNCTION")
	var walk func(n *Node, level int)
	walk = func(n *Node, level int) {
		indent := strings.Repeat("  ", level)
		name := n.Name
		if n.Lib != "" && !strings.HasPrefix(n.Name, n.Lib+"+0x") {
			name += "  [" + n.Lib + "]"
		}
		fmt.Fprintf(bw, "%12d %6.1f%% %9d  %s%s\n", n.Bytes, percent(n.Bytes, d.Bytes), n.Allocs, indent, name)
		var restBytes, restAllocs uint64
		rest := 0
		for _, c := range n.Children {
			if percent(c.Bytes, d.Bytes) < minPercent {
				restBytes += c.Bytes
				restAllocs += c.Allocs
				rest++
				continue
			}
			walk(c, level+1)
		}
		if rest > 0 {
			fmt.Fprintf(bw, "%12d %6.1f%% %9d  %s  [%d more, each under %g%%]\n", restBytes, percent(restBytes, d.Bytes), restAllocs, indent, rest, minPercent)
		}
	}
	walk(root, 0)
	return bw.Flush()
}
