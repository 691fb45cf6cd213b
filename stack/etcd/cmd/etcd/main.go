// etcd, built from its release module (go.etcd.io/etcd/server/v3) for the Kubernetes tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
