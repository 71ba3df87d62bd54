import { describe, expect, it, onTestFinished } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { createPrometheusMetrics } from '../../connectors/prometheus/index.js'
import type { Logger } from '../../src/index.js'
import { kafkaService } from '../helpers/services.js'
import { randomName, tempDir } from '../helpers/tmp.js'
import { committedThrough, consumerOptions, openProducer, produceWords, type WordEvent } from '../kafka-consumer/fixture.js'

describe('metrics and logs of a StatefulConsumer', () => {
  it('publishes commits, lag from the high watermark, snapshots and the claims of its partitions, and logs through its logger', async () => {
    const { brokers } = kafkaService()
    const { producer } = await openProducer(brokers)
    onTestFinished(() => producer.disconnect())
    const topic = randomName('km')
    const job = randomName('job')
    const produced = await produceWords(producer, topic, [0, 1], 150, 50)
    const metrics = createPrometheusMetrics()
    onTestFinished(() => metrics.close())
    const lines: Array<{ level: string; message: string; fields: Record<string, unknown> }> = []
    const at = (level: string) => (fields: object, message: string) => { lines.push({ level, message, fields: fields as Record<string, unknown> }) }
    const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers, job, topics: [topic], stateDir: tempDir(), snapshotRoot: tempDir() }, { logger, batchSize: 50 }))
    onTestFinished(async () => { await consumer.close() })
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    await consumer.close()

    const text = await metrics.metrics()
    for (const partition of [0, 1]) {
      const p = `job_name="${job}",topic="${topic}",partition="${partition}"`
      expect(text).toContain(`tidemark_committed_events_total{${p}} 150`)
      expect(text).toContain(`tidemark_position{${p}} 149`)
      expect(text).toContain(`tidemark_lag_events{${p}} 0`)
      expect(Number(/tidemark_commits_total\{[^}]*\} (\d+)/.exec(text.slice(text.indexOf(`tidemark_commits_total{${p}}`)))![1])).toBeGreaterThanOrEqual(3)
      // The snapshot store's key of a consumer's partition is <topic>-<partition>.
      const s = `job_name="${job}",partition="${topic}-${partition}"`
      expect(text).toContain(`tidemark_ownership_events_total{${s},event="acquired"} 1`)
      expect(text).toMatch(new RegExp(`tidemark_snapshots_total\\{${s},outcome="ok"\\} [1-9]`))
      expect(text).toContain(`tidemark_restores_total{${s},source="empty"} 1`)
      // Known in advance, so there at 0: an alert on increase() sees the first failure or loss.
      expect(text).toContain(`tidemark_snapshots_total{${s},outcome="failed"} 0`)
      expect(text).toContain(`tidemark_snapshot_failures_total{${s},code="TIDEMARK_SNAPSHOT_UPLOAD_FAILED"} 0`)
      expect(text).toContain(`tidemark_ownership_events_total{${s},event="lost"} 0`)
    }
    const messages = lines.map((l) => `${l.level} ${l.message}`)
    expect(messages).toEqual(expect.arrayContaining(['info group assignment', 'info partition started', 'info snapshot committed', 'info partition closed']))
    expect(lines.find((l) => l.message === 'partition started')!.fields).toMatchObject({ job, topic, fetchFrom: '0' })
  })
})
