package dumps

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"strings"
	"unicode/utf8"
)

// The flame graph's geometry, in the SVG's own units: the page scales it
// to the window's width.
const (
	flameWidth  = 1200.0
	frameHeight = 16
	// charWidth is the width of a character of the frames' 12px monospace
	// font, for cutting a name to its frame.
	charWidth = 7.2
	// minFrameWidth is the narrowest frame drawn: a page of every frame of
	// a large dump would be too heavy to open.
	minFrameWidth = 0.1
)

// WriteHTML writes the dump as one self-contained page: a flame graph of
// its live bytes by backtrace, callers below their callees, each frame's
// tooltip giving its function, file, bytes, allocations and share of the
// dump's bytes; a click zooms to a frame, and a search box highlights the
// functions that match a regular expression and adds up their bytes. The
// page loads nothing: its SVG, style and script are inline, and what
// comes from the dump is escaped.
func WriteHTML(w io.Writer, d *Dump) error {
	bw := bufio.NewWriter(w)
	root := CallerTree(d)
	depth := root.Depth()
	height := (depth + 1) * frameHeight
	path := esc(d.Path)
	fmt.Fprintf(bw, htmlHead, path)
	fmt.Fprintf(bw, "<p>%s: Android Native Heap Dump %s, %d records, backtrace_size %d<br>\n", path, esc(d.Version), d.RecordCount, d.BacktraceSize)
	fmt.Fprintf(bw, "Live: %d bytes in %d allocations, %d backtraces", d.Bytes, d.Allocs, len(d.Sites))
	if d.ZygoteAllocs > 0 {
		fmt.Fprintf(bw, " (the zygote's: %d bytes in %d allocations)", d.ZygoteBytes, d.ZygoteAllocs)
	}
	bw.WriteString("</p>\n")
	if root.Bytes == 0 {
		bw.WriteString("<p>The dump holds no live bytes: there is no flame graph to draw.</p>\n</body>\n</html>\n")
		return bw.Flush()
	}
	bw.WriteString(`<p><input id="q" size="40" placeholder="Search functions (a regular expression)"> <button id="r">Reset zoom</button> <span id="m"></span></p>` + "\n")
	fmt.Fprintf(bw, "<svg id=\"fg\" viewBox=\"0 0 %d %d\" width=\"100%%\">\n", int(flameWidth), height)
	hidden := 0
	var draw func(n *Node, offset uint64, level int)
	draw = func(n *Node, offset uint64, level int) {
		width := float64(n.Bytes) * flameWidth / float64(root.Bytes)
		if width < minFrameWidth {
			hidden += n.count()
			return
		}
		x := float64(offset) * flameWidth / float64(root.Bytes)
		y := height - (level+1)*frameHeight
		title := esc(n.Name)
		if n.Lib != "" {
			title += "\nin " + esc(n.Lib)
		}
		title += fmt.Sprintf("\n%d bytes in %d allocations (%.2f%%)", n.Bytes, n.Allocs, percent(n.Bytes, root.Bytes))
		fmt.Fprintf(bw, "<g class=\"f\" data-o=\"%d\" data-b=\"%d\" data-d=\"%d\"><title>%s</title><rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/><text x=\"%.2f\" y=\"%d\">%s</text></g>\n",
			offset, n.Bytes, level, title, x, y, width, frameHeight-1, frameColor(n.Name), x+3, y+frameHeight-4, esc(fitLabel(n.Name, width)))
		for _, c := range n.Children {
			draw(c, offset, level+1)
			offset += c.Bytes
		}
	}
	draw(root, 0, 0)
	bw.WriteString("</svg>\n<p>Each frame is a function, as wide as the live bytes allocated through it, its callees above it. Click a frame to zoom to it, the bottom frame to zoom out.")
	if hidden > 0 {
		fmt.Fprintf(bw, " %d frames of less than 1/%d of the live bytes each are not drawn; their bytes count in their callers.", hidden, int(flameWidth/minFrameWidth))
	}
	bw.WriteString("</p>\n<script>\n" + flameScript + "</script>\n</body>\n</html>\n")
	return bw.Flush()
}

// count is the number of frames of the subtree at n.
func (n *Node) count() int {
	c := 1
	for _, k := range n.Children {
		c += k.count()
	}
	return c
}

// esc escapes text from the dump for the page: C++ names are full of < >
// and &, and a file's name may hold anything.
func esc(s string) string { return html.EscapeString(strings.ToValidUTF8(s, "\uFFFD")) }

// fitLabel cuts name to what a frame width units wide shows, as the
// page's script does when it zooms: nothing under three characters.
func fitLabel(name string, width float64) string {
	n := int((width - 6) / charWidth)
	if n < 3 {
		return ""
	}
	if utf8.RuneCountInString(name) <= n {
		return name
	}
	return string([]rune(name)[:n-2]) + ".."
}

// frameColor is a frame's colour, from its name so that a function has
// the same one everywhere: flamegraph.pl's memory palette, greens.
func frameColor(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return fmt.Sprintf("rgb(0,%d,%d)", 190+int(v&0xff)*50/255, int(v>>8&0xff)*210/255)
}

const htmlHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mdtrace: %s</title>
<style>
body { font: 14px sans-serif; margin: 1em; }
svg { display: block; }
g.f text { font: 12px monospace; fill: black; pointer-events: none; }
g.f rect { stroke: white; stroke-width: 0.5; cursor: pointer; }
g.f.m rect { fill: rgb(230,0,230); }
g.f.a rect { opacity: 0.5; }
</style>
</head>
<body>
`

// flameScript zooms and searches the flame graph. A frame carries its
// byte offset, bytes and level (data-o, data-b, data-d), exact integers
// from which the script lays frames out again; its name is its tooltip's
// first line.
const flameScript = `"use strict";
var W = 1200, CW = 7.2;
var svg = document.getElementById("fg");
var frames = Array.prototype.slice.call(svg.querySelectorAll("g.f"));
var root = frames[0];
function num(g, k) { return Number(g.getAttribute("data-" + k)); }
function label(g) { return g.querySelector("title").textContent.split("\n")[0]; }
function place(g, x, w) {
	var r = g.querySelector("rect"), t = g.querySelector("text");
	r.setAttribute("x", x.toFixed(2));
	r.setAttribute("width", w.toFixed(2));
	t.setAttribute("x", (x + 3).toFixed(2));
	var n = Math.floor((w - 6) / CW), s = Array.from(label(g));
	t.textContent = n < 3 ? "" : s.length <= n ? s.join("") : s.slice(0, n - 2).join("") + "..";
}
function zoom(z) {
	var zo = num(z, "o"), zb = num(z, "b"), zd = num(z, "d");
	frames.forEach(function (g) {
		var o = num(g, "o"), b = num(g, "b"), d = num(g, "d");
		var inside = o >= zo && o + b <= zo + zb;
		var below = d < zd && o <= zo && o + b >= zo + zb;
		g.style.display = inside || below ? "" : "none";
		g.classList.toggle("a", below);
		if (below) place(g, 0, W);
		else if (inside) place(g, (o - zo) * W / zb, b * W / zb);
	});
}
function search(text) {
	var re = null, m = document.getElementById("m");
	m.textContent = "";
	if (text) {
		try { re = new RegExp(text); } catch (e) { m.textContent = "not a regular expression"; return; }
	}
	var spans = [];
	frames.forEach(function (g) {
		var hit = re !== null && re.test(label(g));
		g.classList.toggle("m", hit);
		if (hit) spans.push([num(g, "o"), num(g, "b")]);
	});
	if (re === null) return;
	spans.sort(function (a, b) { return a[0] - b[0]; });
	var sum = 0, end = 0;
	spans.forEach(function (s) {
		var from = Math.max(s[0], end), to = s[0] + s[1];
		if (to > from) { sum += to - from; end = to; }
	});
	var all = num(root, "b");
	m.textContent = "matched: " + sum + " bytes (" + (100 * sum / all).toFixed(2) + "%)";
}
svg.addEventListener("click", function (e) {
	var g = e.target.closest("g.f");
	if (g) zoom(g);
});
document.getElementById("r").addEventListener("click", function () { zoom(root); });
document.getElementById("q").addEventListener("input", function (e) { search(e.target.value); });
`
