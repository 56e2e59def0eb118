module github.com/idem-go/idem/keystore/storeurl

go 1.26.0
