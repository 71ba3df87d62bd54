export { PartitionFetcher, type FetchedBatch, type FetchedPartition, type PartitionFetcherOptions } from './partition-fetcher.js'
