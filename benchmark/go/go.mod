module weft/benchmark/go

go 1.26
