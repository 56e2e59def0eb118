package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// The bounds a --config file is held to before the YAML parser sees it.
// goccy/go-yaml's memory grows with the square of the nesting depth (a
// 40 KB file of "[[[[…" takes 0.7 GB) and it has no depth option, so the
// file's size and nesting are checked first, by a scan that allocates
// nothing. A real config is a list of flat route mappings: it nests about
// five levels deep and is a few kilobytes long.
const (
	maxConfigSize  = 1 << 20 // bytes
	maxConfigDepth = 64      // nested collections, block and flow together
)

// readConfigFile reads path, refusing a file larger than maxConfigSize
// without reading more than one byte beyond it.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errConfig, path, err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes (1 MiB); a config is a list of routes, a few kilobytes", errConfig, path, maxConfigSize)
	}
	return data, nil
}

// checkConfigShape refuses data larger than maxConfigSize, or nesting
// collections deeper than maxConfigDepth, naming the file and the line
// where the limit is crossed.
//
// The scan is YAML's structure without its values: block collections nest
// by indentation (each deeper indentation, and each "- " or "? " that
// starts a line's content, is a level), flow collections by [ and {.
// Quoted scalars, block scalars (| and >) and comments are skipped, as are
// brackets inside a plain scalar of a block context ("/v1/{id}"), so that
// no text can count as nesting. Aliases need no bound here: the schema
// decodes every route on its own, and a route's fields are scalars or
// lists of scalars, so an alias never expands into nested collections
// (an "alias bomb" is refused by the decoder at its first nested list;
// FuzzParseConfig's seeds include one).
func checkConfigShape(name string, data []byte) error {
	if len(data) > maxConfigSize {
		return fmt.Errorf("%w: %s: larger than %d bytes (1 MiB); a config is a list of routes, a few kilobytes", errConfig, name, maxConfigSize)
	}
	var sc shapeScan
	line := 0
	for len(data) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		if d := sc.line(bytes.TrimSuffix(l, []byte{'\r'})); d > maxConfigDepth {
			return fmt.Errorf("%w: %s:%d: nesting deeper than %d levels; a config nests at most about 5 (routes, a route, its scope or methods)", errConfig, name, line, maxConfigDepth)
		}
	}
	return nil
}

// shapeScan is the state of checkConfigShape between lines.
type shapeScan struct {
	// indents are the columns of the open block collections, the deepest
	// last; at most maxConfigDepth+1 long, since the scan stops there.
	indents [maxConfigDepth + 2]int
	nblock  int
	// flow is the depth of [ and { open; flowBase the block depth where
	// the outermost one opened.
	flow, flowBase int
	quote          byte // ' or " while a quoted scalar spans lines
	// blockScalar: lines indented deeper than scalarIndent are the text
	// of a | or > scalar.
	blockScalar  bool
	scalarIndent int
}

// depth is the current nesting depth.
func (s *shapeScan) depth() int {
	if s.flow > 0 {
		return s.flowBase + s.flow
	}
	return s.nblock
}

// push opens a block level at column col; false once the depth is over
// the limit (the caller reports it).
func (s *shapeScan) push(col int) bool {
	if s.nblock > maxConfigDepth {
		return false
	}
	s.indents[s.nblock] = col
	s.nblock++
	return true
}

// line scans one line and returns the deepest nesting it reached.
func (s *shapeScan) line(l []byte) int {
	indent := 0
	for indent < len(l) && l[indent] == ' ' {
		indent++
	}
	blank := indent == len(l) || l[indent] == '#'
	if s.blockScalar {
		if blank || indent > s.scalarIndent {
			return s.depth()
		}
		s.blockScalar = false
	}
	i := 0
	if s.quote == 0 && s.flow == 0 {
		if blank {
			return s.depth()
		}
		if indent == 0 && (bytes.HasPrefix(l, []byte("---")) || bytes.HasPrefix(l, []byte("...")) || l[0] == '%') {
			s.nblock = 0 // a new document (or a directive)
			if l[0] == '%' {
				return 0
			}
			indent = 3
		}
		for s.nblock > 0 && s.indents[s.nblock-1] > indent {
			s.nblock--
		}
		if (s.nblock == 0 || s.indents[s.nblock-1] < indent) && !s.push(indent) {
			return s.depth()
		}
		i = indent
		// "- - a" and "? a" open a level at each indicator.
		for i < len(l) && (l[i] == '-' || l[i] == '?') && (i+1 == len(l) || l[i+1] == ' ' || l[i+1] == '\t') {
			i++
			for i < len(l) && (l[i] == ' ' || l[i] == '\t') {
				i++
			}
			if i < len(l) && l[i] != '#' && !s.push(i) {
				return s.depth()
			}
		}
	}
	deepest := s.depth()
	tokenStart := true // at the start of a node: [ { " ' | > mean something
	plain := false     // inside a plain scalar of a block context
	for ; i < len(l); i++ {
		c := l[i]
		switch s.quote {
		case '\'':
			if c == '\'' {
				if i+1 < len(l) && l[i+1] == '\'' {
					i++
				} else {
					s.quote = 0
				}
			}
			continue
		case '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				s.quote = 0
			}
			continue
		}
		space := c == ' ' || c == '\t'
		if c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t') {
			break // a comment
		}
		if s.flow > 0 {
			switch {
			case c == '[' || c == '{':
				s.flow++
				deepest = max(deepest, s.depth())
			case c == ']' || c == '}':
				s.flow--
			case (c == '"' || c == '\'') && (i == 0 || strings.IndexByte(" \t[{,:", l[i-1]) >= 0):
				s.quote = c
			}
			if s.flow == 0 {
				tokenStart, plain = false, false
			}
			continue
		}
		switch {
		case space:
			continue
		case c == ':' && (i+1 == len(l) || l[i+1] == ' ' || l[i+1] == '\t'):
			tokenStart, plain = true, false // a key ended: its value starts
			continue
		case plain || !tokenStart:
			plain = true
			continue
		}
		switch c {
		case '[', '{':
			s.flow, s.flowBase = 1, s.nblock
			deepest = max(deepest, s.depth())
		case '"', '\'':
			s.quote = c
			tokenStart = false
		case '|', '>':
			s.blockScalar = true
			s.scalarIndent = indent
			if s.nblock > 0 {
				s.scalarIndent = max(indent, s.indents[s.nblock-1])
			}
			return deepest
		case '&', '!', '*':
			for i+1 < len(l) && l[i+1] != ' ' && l[i+1] != '\t' {
				i++ // an anchor, tag or alias: a node (or its value) follows
			}
		default:
			plain = true
		}
	}
	return deepest
}
