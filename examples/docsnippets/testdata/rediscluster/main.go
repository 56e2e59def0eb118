// Mirror of the Redis Cluster block of docs/scale.md.
//
//docsnippets:build-only needs a Redis Cluster
package main

import (
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/keystore/redisstore"
)

func open() (*redisstore.Store, error) {
	rdb := redis.NewClusterClient(redisstore.ClusterOptions([]string{"10.0.0.1:6379", "10.0.0.2:6379"}))
	store, err := redisstore.New(rdb, redisstore.WithBuckets(64), redisstore.WithWaitReplicas(1, 500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	// or: store, rdb, err := redisstore.OpenURL("redis-cluster://10.0.0.1:6379,10.0.0.2:6379?wait_replicas=1&wait_timeout=500ms")
	return store, nil
}

func main() {
	if _, err := open(); err != nil {
		log.Fatal(err)
	}
}
