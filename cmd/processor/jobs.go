package main

// The jobs `processor run` knows: each registers itself (stream.Register)
// when its package is imported.
import (
	_ "github.com/weirstream/weir/examples/balance"
	_ "github.com/weirstream/weir/examples/count"
	_ "github.com/weirstream/weir/examples/nexmark"
	_ "github.com/weirstream/weir/examples/orders"
	_ "github.com/weirstream/weir/examples/wordcount"
)
