import { EXIT, help, JSON_OPTION, noMore, parse, print, snapshotStoreArg, table, withSnapshotStore, type Command } from '../context.js'
import { listPartitions } from '../holdings.js'

const USAGE = `usage:
  tidemark jobs <snapshot-store-url> [--region R] [--json]
      the jobs and partitions the store holds snapshots of: for each, the
      number of snapshots and the newest one's id (0 and - for a partition
      that holds only a claim or data objects). The --job and --partition
      values the other commands take

  --region R   the region of an s3:// store (default: the URL's region
               parameter, else AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)`

export const jobs: Command = {
  name: 'jobs',
  usage: USAGE,
  async run(argv, io) {
    const parsed = parse(argv, { ...JSON_OPTION, region: { type: 'string' } })
    if (parsed === undefined) return help(io, USAGE)
    const { positionals: [arg, ...extra], values } = parsed
    const url = snapshotStoreArg(arg)
    noMore(extra)
    const held = await withSnapshotStore(url, values.region, io, listPartitions)
    print(io, values.json, held, () => held.length === 0
      ? `${url} holds no jobs`
      : table(['job', 'partition', 'snapshots', 'newest'], held.map((h) => [h.job, h.partition, String(h.snapshots), h.newest ?? '-'])))
    return EXIT.ok
  },
}
