// Command coredns is CoreDNS with only the plugins the test cluster's Corefile uses
// (tests/cluster/dns.py). CoreDNS's own main links every plugin, including the cloud DNS
// providers whose SDKs would double the cold build; plugins register themselves on import.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
