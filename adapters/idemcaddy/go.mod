module github.com/idem-go/idem/adapters/idemcaddy

go 1.26.0
