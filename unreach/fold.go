package unreach

// Folded is an unreachable block as libmemunreachable's LeakFolding
// reports it: a block of a dominator (a set of blocks that point to each
// other, which no other unreachable block points to), with what it holds.
type Folded struct {
	// Index is the block's index in Image.Blocks.
	Index int
	// ReferencedCount and ReferencedSize are the other unreachable
	// blocks reachable from the block's set, the set's other blocks
	// included.
	ReferencedCount, ReferencedSize uint64
}

// Fold folds the unreachable blocks of res: it returns, in address order,
// the blocks of the dominators, each with the unreachable blocks it holds.
// The graph of unreachable blocks is cut into strongly connected
// components (Tarjan); those no other component points to are the
// dominators, and each counts the components it reaches once.
func Fold(img *Image, res *Result) []Folded {
	// Tarjan's algorithm, without recursion: a chain of a million
	// blocks is a million frames deep.
	n := len(img.Blocks)
	index := make([]int, n)
	low := make([]int, n)
	comp := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
		comp[i] = -1
	}
	var (
		stack []int
		next  int
		comps [][]int
	)
	type frame struct{ v, e int }
	for root := range n {
		if res.Reachable[root] || index[root] >= 0 {
			continue
		}
		call := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			edges := res.Edges[f.v]
			if f.e < len(edges) {
				w := edges[f.e]
				f.e++
				switch {
				case index[w] < 0:
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				case onStack[w]:
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				u := call[len(call)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] == index[v] {
				var c []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = len(comps)
					c = append(c, w)
					if w == v {
						break
					}
				}
				comps = append(comps, c)
			}
		}
	}
	// The components' graph, and which components something points to.
	succ := make([][]int, len(comps))
	pointed := make([]bool, len(comps))
	for v, edges := range res.Edges {
		for _, w := range edges {
			if comp[v] != comp[w] {
				succ[comp[v]] = append(succ[comp[v]], comp[w])
				pointed[comp[w]] = true
			}
		}
	}
	seen := make([]int, len(comps)) // the dominator+1 that last counted each component
	var out []Folded
	for c := range comps {
		if pointed[c] {
			continue
		}
		var count, size uint64
		todo := []int{c}
		seen[c] = c + 1
		for len(todo) > 0 {
			d := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			for _, v := range comps[d] {
				count++
				size += max(img.Blocks[v].Size, 1)
			}
			for _, e := range succ[d] {
				if seen[e] != c+1 {
					seen[e] = c + 1
					todo = append(todo, e)
				}
			}
		}
		for _, v := range comps[c] {
			out = append(out, Folded{Index: v, ReferencedCount: count - 1, ReferencedSize: size - max(img.Blocks[v].Size, 1)})
		}
	}
	sortFolded(out)
	return out
}
