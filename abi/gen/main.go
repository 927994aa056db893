// Command gen writes package abi's Go constants from mdtrace's ABI header,
// abi/mdtrace_abi.h (go generate ./abi):
//
//	go run ./gen [-c check.c] mdtrace_abi.h abi.go
//
// Every object-like #define of a number, a string or an expression of
// them and every enumerator becomes a constant, NAME_IN_CAPS as
// NameInCaps; every struct of fixed-width fields its size and its fields'
// offsets, struct md_name's field f as SizeofName and OffsetofNameF. The
// header's comments go along. With -c, gen also writes a C program that
// includes the header and prints each Go constant's name and the value C
// gives it, one a line, for abi_test.go to compare with Go's.
//
// The header is read a line at a time: a #define on one line, an enum's
// enumerators and a struct's fields between a line that opens it and one
// that holds "};". Anything else (typedefs of fixed-width types, static
// inline functions, _Static_assert) is skipped.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

func main() {
	check := flag.String("c", "", "also write a C program that prints the values C gives the constants")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: gen [-c check.c] HEADER OUTPUT.go")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	header, out := flag.Arg(0), flag.Arg(1)
	src, err := os.ReadFile(header)
	if err == nil {
		err = generate(src, filepath.Base(header), out, *check)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: %s: %v\n", header, err)
		os.Exit(1)
	}
}

func generate(src []byte, name, out, check string) error {
	h, err := parse(string(src))
	if err != nil {
		return err
	}
	code, err := h.goFile(name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, code, 0o644); err != nil {
		return err
	}
	if check == "" {
		return nil
	}
	return os.WriteFile(check, h.checkProgram(name), 0o644)
}

// A constant is one Go constant and the C expression it stands for.
type constant struct {
	goName, goValue string
	cExpr           string // what C prints for it
	isString        bool
	doc, comment    string // the header's comments: above it, after it
}

// A group is a const block: the enumerators of an enum, a struct's layout,
// or a run of #defines not parted by a blank line.
type group struct {
	doc    string
	consts []constant
}

type header struct {
	groups []group
	// names maps the C names defined so far to their Go names, ints
	// their values where they are plain numbers, sizes the byte sizes
	// of the fixed-width types.
	names map[string]string
	ints  map[string]uint64
	sizes map[string]uint64
}

var (
	defineRe     = regexp.MustCompile(`^#\s*define\s+(\w+)(\(?)\s*(.*)$`)
	enumRe       = regexp.MustCompile(`^enum\s+(\w+)\s*\{$`)
	structRe     = regexp.MustCompile(`^struct\s+(\w+)\s*\{$`)
	typedefRe    = regexp.MustCompile(`^typedef\s+(\w+)\s+(\w+)\s*;$`)
	enumeratorRe = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	fieldRe      = regexp.MustCompile(`^(\w+)\s+(\w+)(?:\[(\w+)\])?$`)
	tokenRe      = regexp.MustCompile(`^\s*(?:("(?:[^"\\]|\\.)*")|(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*|([A-Za-z_]\w*)|(<<|>>|[-+*/%&|^()]))`)
)

// parse reads the header's constants and layouts.
func parse(src string) (*header, error) {
	h := &header{
		names: map[string]string{},
		ints:  map[string]uint64{},
		sizes: map[string]uint64{"__UINT64_TYPE__": 8, "__UINT32_TYPE__": 4, "__UINT16_TYPE__": 2, "__UINT8_TYPE__": 1},
	}
	lines, comments, err := splitComments(src)
	if err != nil {
		return nil, err
	}
	// doc is the comment that ends on the line above, if any.
	doc := func(i int) string {
		if i > 0 && strings.TrimSpace(lines[i-1]) == "" && comments[i-1] != "" {
			return comments[i-1]
		}
		return ""
	}
	var defines *group
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" {
			if comments[i] == "" {
				defines = nil // a blank line ends a run of #defines
			}
			continue
		}
		var m []string
		switch {
		case strings.HasPrefix(line, "#"):
			if m = defineRe.FindStringSubmatch(line); m == nil {
				continue // #ifndef, #endif
			}
			if m[2] != "" {
				return nil, fmt.Errorf("line %d: function-like macro %s: write a static inline function", i+1, m[1])
			}
			if m[3] == "" {
				continue // the include guard
			}
			c, err := h.define(m[1], m[3])
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", i+1, err)
			}
			c.comment = comments[i]
			if defines == nil {
				h.groups = append(h.groups, group{doc: doc(i)})
				defines = &h.groups[len(h.groups)-1]
			} else {
				c.doc = doc(i)
			}
			defines.consts = append(defines.consts, c)
		case enumRe.MatchString(line), structRe.MatchString(line):
			end := i + 1
			for end < len(lines) && strings.TrimSpace(lines[end]) != "};" {
				end++
			}
			if end == len(lines) {
				return nil, fmt.Errorf("line %d: no \"};\" ends it", i+1)
			}
			g := group{doc: doc(i)}
			if m = enumRe.FindStringSubmatch(line); m != nil {
				err = h.enum(&g, lines[i+1:end], comments[i+1:end])
			} else {
				m = structRe.FindStringSubmatch(line)
				err = h.layout(&g, m[1], lines[i+1:end])
			}
			if err != nil {
				return nil, fmt.Errorf("%s %s (line %d): %v", strings.Fields(line)[0], m[1], i+1, err)
			}
			h.groups = append(h.groups, g)
			defines = nil
			i = end
		case typedefRe.MatchString(line):
			m = typedefRe.FindStringSubmatch(line)
			size, ok := h.sizes[m[1]]
			if !ok {
				return nil, fmt.Errorf("line %d: typedef of %s, not a fixed-width type", i+1, m[1])
			}
			h.sizes[m[2]] = size
		case strings.HasPrefix(line, "static inline"):
			// A function: skipped to its closing brace.
			depth := 0
			for ; i < len(lines); i++ {
				depth += strings.Count(lines[i], "{") - strings.Count(lines[i], "}")
				if depth == 0 && strings.Contains(lines[i], "}") {
					break
				}
			}
			defines = nil
		case strings.HasPrefix(line, "_Static_assert"):
		default:
			return nil, fmt.Errorf("line %d: not understood: %s", i+1, line)
		}
	}
	return h, nil
}

// splitComments returns the lines of src without their comments, and each
// line's comments: the text of a block comment goes with its last line.
func splitComments(src string) (lines, comments []string, err error) {
	var code, text strings.Builder
	inComment := false
	for n, line := range strings.Split(src, "\n") {
		code.Reset()
		for line != "" {
			if inComment {
				end := strings.Index(line, "*/")
				if end < 0 {
					text.WriteString(commentLine(line) + "\n")
					line = ""
					break
				}
				text.WriteString(commentLine(line[:end]))
				line, inComment = line[end+2:], false
				continue
			}
			start := strings.Index(line, "/*")
			if strings.HasPrefix(strings.TrimSpace(line), "//") || strings.Contains(line, "//") && (start < 0 || strings.Index(line, "//") < start) {
				return nil, nil, fmt.Errorf("line %d: // comments are not read: write /* */", n+1)
			}
			if start < 0 {
				code.WriteString(line)
				break
			}
			code.WriteString(line[:start])
			line, inComment = line[start+2:], true
			if text.Len() > 0 && !strings.HasSuffix(text.String(), "\n") {
				text.WriteString(" ")
			}
		}
		lines = append(lines, code.String())
		if inComment {
			comments = append(comments, "")
		} else {
			comments = append(comments, strings.TrimSpace(text.String()))
			text.Reset()
		}
	}
	if inComment {
		return nil, nil, fmt.Errorf("a comment does not end")
	}
	return lines, comments, nil
}

// commentLine is a line of a block comment without its leading " * ".
func commentLine(s string) string {
	s = strings.TrimSpace(s)
	if s == "*" {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(s, "* "))
}

// goName is NAME_IN_CAPS as NameInCaps, with Go's initialisms (OK, FD).
func goName(c string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(c), "_") {
		switch {
		case part == "ok" || part == "fd" || part == "id":
			b.WriteString(strings.ToUpper(part))
		case part != "":
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// define reads #define name value.
func (h *header) define(name, value string) (constant, error) {
	if _, ok := h.names[name]; ok {
		return constant{}, fmt.Errorf("%s defined twice", name)
	}
	var toks []string
	isString := false
	for rest := strings.TrimSpace(value); rest != ""; {
		m := tokenRe.FindStringSubmatch(rest)
		if m == nil {
			return constant{}, fmt.Errorf("%s: cannot read %q (numbers, strings, names defined above and + - * / %% << >> & | ^ ( ) only)", name, rest)
		}
		rest = strings.TrimSpace(rest[len(m[0]):])
		switch {
		case m[1] != "":
			if len(toks) > 0 || rest != "" {
				return constant{}, fmt.Errorf("%s: a string must stand alone", name)
			}
			s, err := strconv.Unquote(m[1])
			if err != nil {
				return constant{}, fmt.Errorf("%s: %v", name, err)
			}
			toks, isString = append(toks, strconv.Quote(s)), true
		case m[2] != "":
			toks = append(toks, m[2])
		case m[3] != "":
			g, ok := h.names[m[3]]
			if !ok {
				return constant{}, fmt.Errorf("%s: %s is not defined above", name, m[3])
			}
			toks = append(toks, g)
		default:
			toks = append(toks, m[4])
		}
	}
	toks = stripParens(toks)
	c := constant{goName: goName(name), goValue: joinExpr(toks), cExpr: name, isString: isString}
	h.names[name] = c.goName
	if len(toks) == 1 && !isString {
		if v, err := strconv.ParseUint(toks[0], 0, 64); err == nil {
			h.ints[name] = v
		}
	}
	return c, nil
}

// stripParens drops parentheses around the whole expression.
func stripParens(toks []string) []string {
	for len(toks) > 2 && toks[0] == "(" && toks[len(toks)-1] == ")" {
		depth := 0
		for i, t := range toks {
			if t == "(" {
				depth++
			} else if t == ")" {
				depth--
			}
			if depth == 0 && i < len(toks)-1 {
				return toks // the first parenthesis closes before the end
			}
		}
		toks = toks[1 : len(toks)-1]
	}
	return toks
}

func joinExpr(toks []string) string {
	var b strings.Builder
	for i, t := range toks {
		if i > 0 && t != ")" && toks[i-1] != "(" {
			b.WriteString(" ")
		}
		b.WriteString(t)
	}
	return b.String()
}

// enum reads the enumerators of an enum, one a line.
func (h *header) enum(g *group, lines, comments []string) error {
	next := uint64(0)
	for i, line := range lines {
		line = strings.TrimSuffix(strings.TrimSpace(line), ",")
		if line == "" {
			continue
		}
		name, value, explicit := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !enumeratorRe.MatchString(name) {
			return fmt.Errorf("cannot read %q: one enumerator a line", line)
		}
		if explicit {
			v, err := strconv.ParseUint(strings.TrimRight(strings.TrimSpace(value), "uUlL"), 0, 64)
			if err != nil {
				return fmt.Errorf("%s: the value must be a number", name)
			}
			next = v
		}
		if _, ok := h.names[name]; ok {
			return fmt.Errorf("%s defined twice", name)
		}
		c := constant{goName: goName(name), goValue: strconv.FormatUint(next, 10), cExpr: name, comment: comments[i]}
		h.names[name], h.ints[name] = c.goName, next
		g.consts = append(g.consts, c)
		next++
	}
	return nil
}

// layout reads a struct's fields, fixed-width types or arrays of them, and
// lays them out as the C compilers do: each at the next multiple of its
// size, the struct's size a multiple of its largest field.
func (h *header) layout(g *group, name string, lines []string) error {
	goStruct := goName(strings.TrimPrefix(name, "md_"))
	var off, align uint64 = 0, 1
	var consts []constant
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		decl, ok := strings.CutSuffix(line, ";")
		m := fieldRe.FindStringSubmatch(strings.TrimSpace(decl))
		if !ok || m == nil {
			return fmt.Errorf("cannot read %q: one field a line, a fixed-width type or an array of one", line)
		}
		size, ok := h.sizes[m[1]]
		if !ok {
			return fmt.Errorf("%s: %s is not a fixed-width type", m[2], m[1])
		}
		n := uint64(1)
		if m[3] != "" {
			var err error
			if n, err = strconv.ParseUint(m[3], 0, 64); err != nil {
				if n, ok = h.ints[m[3]]; !ok {
					return fmt.Errorf("%s: the length %s is not a number defined above", m[2], m[3])
				}
			}
		}
		off = (off + size - 1) / size * size
		align = max(align, size)
		consts = append(consts, constant{
			goName:  "Offsetof" + goStruct + goName(m[2]),
			goValue: strconv.FormatUint(off, 10),
			cExpr:   fmt.Sprintf("__builtin_offsetof(struct %s, %s)", name, m[2]),
		})
		off += n * size
	}
	size := constant{
		goName:  "Sizeof" + goStruct,
		goValue: strconv.FormatUint((off+align-1)/align*align, 10),
		cExpr:   fmt.Sprintf("sizeof(struct %s)", name),
	}
	g.doc = strings.TrimSpace("The layout of struct " + name + ".\n" + g.doc)
	g.consts = append([]constant{size}, consts...)
	return nil
}

// goFile is package abi's source.
func (h *header) goFile(name string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by abi/gen from %s; DO NOT EDIT.\n\npackage abi\n", name)
	for _, g := range h.groups {
		b.WriteString("\n")
		writeComment(&b, g.doc, "")
		if len(g.consts) == 1 && g.consts[0].doc == "" {
			c := g.consts[0]
			fmt.Fprintf(&b, "const %s = %s", c.goName, c.goValue)
			if c.comment != "" {
				fmt.Fprintf(&b, " // %s", c.comment)
			}
			b.WriteString("\n")
			continue
		}
		b.WriteString("const (\n")
		for i, c := range g.consts {
			if c.doc != "" {
				if i > 0 {
					b.WriteString("\n")
				}
				writeComment(&b, c.doc, "\t")
			}
			fmt.Fprintf(&b, "\t%s = %s", c.goName, c.goValue)
			if c.comment != "" {
				fmt.Fprintf(&b, " // %s", strings.ReplaceAll(c.comment, "\n", " "))
			}
			b.WriteString("\n")
		}
		b.WriteString(")\n")
	}
	return format.Source(b.Bytes())
}

func writeComment(b *bytes.Buffer, text, indent string) {
	if text == "" {
		return
	}
	for _, l := range strings.Split(text, "\n") {
		fmt.Fprintf(b, "%s//%s\n", indent, strings.TrimRight(" "+l, " "))
	}
}

// checkProgram is a C program that prints each Go constant's name and the
// value C gives it, a line each: a number in decimal, a string as it is.
func (h *header) checkProgram(name string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "/* Written by abi/gen for abi_test.go. */\n#include <stdio.h>\n\n#include %q\n\nint main(void)\n{\n", name)
	for _, g := range h.groups {
		for _, c := range g.consts {
			if c.isString {
				fmt.Fprintf(&b, "\tprintf(\"%%s %%s\\n\", %q, %s);\n", c.goName, c.cExpr)
			} else {
				fmt.Fprintf(&b, "\tprintf(\"%%s %%llu\\n\", %q, (unsigned long long)(%s));\n", c.goName, c.cExpr)
			}
		}
	}
	b.WriteString("\treturn 0;\n}\n")
	return b.Bytes()
}
