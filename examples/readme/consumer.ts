// The README's StatefulConsumer example, a complete program: compiled under
// strict against the packed package with kafkajs installed, and run against
// librdkafka's Kafka mock (KAFKA_BROKERS) by test/package/pack.package.ts,
// which produces words and stops it with SIGTERM. The part between the region
// markers is the README's code block, character for character, and nothing
// but comments lies outside it (test/package/readme-examples.test.ts).

// #region readme
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { openSnapshotStore, valueState } from 'tidemark'
import { StatefulConsumer } from 'tidemark/kafka'

const counts = valueState<number>('counts')
const consumer = new StatefulConsumer<{ word: string }>({
  job: 'wordcount',                                            // snapshot namespace; group id tidemark-wordcount
  brokers: (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(','),
  topics: ['words'],                                           // records: JSON values such as {"word":"tide"}
  stateDir: resolve('data/wordcount'),                         // <stateDir>/<topic>-<partition> per partition
  states: [counts],
  handler: (tx, record) => {
    if (record.value === null) return                          // a tombstone
    const view = tx.value(counts)
    view.put(record.value.word, (view.getSync(record.value.word) ?? 0) + 1)
  },
  snapshots: {
    store: await openSnapshotStore(pathToFileURL(resolve('data/wordcount-snapshots')).href),
    schedule: { intervalMs: 60_000 },
  },
})
consumer.on('commit', ({ topic, partition, offset }) => console.log(`${topic}/${partition}: committed up to offset ${offset}`))
consumer.on('partition-failed', ({ topic, partition, error }) => console.error(`${topic}/${partition}: ${error.code}`))
await consumer.start()
// A hand-off snapshot of every partition while still a member, then leave the group.
process.once('SIGTERM', () => void consumer.close().then(() => process.exit(0)))
// #endregion readme
