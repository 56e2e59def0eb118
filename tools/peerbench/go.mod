module github.com/idem-go/idem/tools/peerbench

go 1.26.0
