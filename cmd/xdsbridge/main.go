// Command xdsbridge serves service registries to Envoy and gRPC clients over xDS.
package main

func main() {}
