// etcdctl, built from its release module (go.etcd.io/etcd/etcdctl/v3) for the Kubernetes tests.
package main

import (
	"go.etcd.io/etcd/etcdctl/v3/ctlv3"
)

func main() {
	ctlv3.MustStart()
}
