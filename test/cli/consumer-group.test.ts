// Every command that takes --partition, on a snapshot store written by a real
// StatefulConsumer (on the Kafka mock): its partitions are named
// `<topic>-<partition>`, as `tidemark jobs` lists them.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { StatefulConsumer } from '../../connectors/kafka/index.js'
import { committedThrough, consumerOptions, groupFixture, produceWords, type WordEvent } from '../kafka-consumer/fixture.js'
import { tempDir } from '../helpers/tmp.js'
import { cli, lines, tidemark } from './helpers.js'

/** Runs of one member of a consumer group over four partitions, `counts` records each: each close leaves a hand-off snapshot of every partition. */
async function consumerStore(counts: number[]): Promise<{ url: string; job: string; topic: string; last: Map<number, bigint> }> {
  const f = await groupFixture('cli')
  const stateDir = tempDir()
  const last = new Map<number, bigint>()
  for (const count of counts) {
    const produced = await produceWords(f.producer, f.topic, [0, 1, 2, 3], count, 10)
    for (const r of produced) last.set(r.partition, r.offset)
    const consumer = new StatefulConsumer<WordEvent>(consumerOptions({ brokers: f.brokers, job: f.job, topics: [f.topic], stateDir, snapshotRoot: f.snapshotRoot }))
    const done = committedThrough([consumer], produced)
    await consumer.start()
    await done
    const closed = await consumer.close()
    expect(closed.partitions.every((p) => p.handoff !== undefined)).toBe(true)
  }
  return { url: pathToFileURL(f.snapshotRoot).href, job: f.job, topic: f.topic, last }
}

describe('a consumer group\'s partitions, as `tidemark jobs` names them', () => {
  it('jobs, snapshots list/show/verify, restore, positions, state get/dump and gc take --partition <topic>-<n>', async () => {
    const { url, job, topic, last } = await consumerStore([20, 10])
    const key = `${topic}-1`
    const P = ['--job', job, '--partition', key]

    // The bin, as a user runs it: what jobs prints is what --partition takes.
    const listedJobs = await cli(['jobs', url])
    expect(listedJobs.stdout.split('\n')[0]).toMatch(/^job +partition +snapshots +newest$/)
    const row = listedJobs.stdout.split('\n').find((l) => l.split(/ +/)[1] === key)!.split(/ +/)
    expect(row.slice(0, 3)).toEqual([job, key, '2'])
    const viaBin = await cli(['snapshots', 'list', url, '--job', row[0]!, '--partition', row[1]!, '--json'])
    expect((JSON.parse(viaBin.stdout) as unknown[]).length).toBe(2)

    expect(JSON.parse((await tidemark('jobs', url, '--json')).stdout)).toEqual([0, 1, 2, 3].map((p) => ({ job, partition: `${topic}-${p}`, snapshots: 2, newest: expect.any(String) })))

    const list = await tidemark('snapshots', 'list', url, ...P, '--json')
    expect(list).toMatchObject({ code: 0, stderr: '' })
    const snapshots = JSON.parse(list.stdout) as Array<{ id: string; positions: Array<{ topic: string; partition: number; offset: string }> }>
    expect(snapshots).toHaveLength(2)
    expect(snapshots[0]!.positions).toEqual([{ topic, partition: 1, offset: String(last.get(1)) }])
    // A leading zero names the same partition, as `--partition 007` does.
    expect((await tidemark('snapshots', 'list', url, '--job', job, '--partition', `${topic}-01`, '--json')).stdout).toBe(list.stdout)

    const shown = await tidemark('snapshots', 'show', url, snapshots[1]!.id, ...P, '--json')
    expect(shown).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: snapshots[1]!.id, job, partition: key })

    const verified = await tidemark('snapshots', 'verify', url, '--all', ...P, '--json')
    expect(verified.code).toBe(0)
    expect(JSON.parse(verified.stdout)).toMatchObject(snapshots.map((s) => ({ id: s.id, ok: true })))

    const target = join(tempDir(), key)
    const restored = await tidemark('restore', url, ...P, '--target', target, '--json')
    expect(restored).toMatchObject({ code: 0 })
    expect(JSON.parse(restored.stdout)).toMatchObject({ source: 'snapshot', snapshot: { id: snapshots[0]!.id }, positions: [{ topic, partition: 1, offset: String(last.get(1)) }] })
    expect(JSON.parse((await tidemark('positions', target, '--json')).stdout)).toMatchObject({ positions: [{ topic, partition: 1, offset: String(last.get(1)) }] })

    // 30 records on partition 1: the fold's '#count'.
    expect(lines((await tidemark('state', 'get', url, '#count', '--state', 'sums', ...P)).stdout)).toEqual([{ state: 'sums', key: '#count', value: 30 }])
    const older = await tidemark('state', 'get', url, '#count', '--state', 'sums', ...P, '--snapshot', snapshots[1]!.id)
    expect(lines(older.stdout)).toEqual([{ state: 'sums', key: '#count', value: 20 }])
    const dumped = lines((await tidemark('state', 'dump', url, '--state', 'sums', ...P)).stdout)
    expect(dumped).toEqual(lines((await tidemark('state', 'dump', target, '--state', 'sums')).stdout))
    expect(dumped).toContainEqual({ state: 'sums', key: '#count', value: 30 })

    const dry = await tidemark('gc', url, ...P, '--retain', '1', '--dry-run', '--json')
    expect(dry).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(dry.stdout)).toMatchObject({ dryRun: true, retained: [snapshots[0]!.id], deletedManifests: [`${job}/${key}/manifests/${snapshots[1]!.id}.json`] })
    const collected = await tidemark('gc', url, ...P, '--retain', '1', '--grace-ms', '0', '--json')
    expect(JSON.parse(collected.stdout)).toMatchObject({ dryRun: false, retained: [snapshots[0]!.id], deletedManifests: [`${job}/${key}/manifests/${snapshots[1]!.id}.json`] })
    expect((JSON.parse((await tidemark('snapshots', 'list', url, ...P, '--json')).stdout) as unknown[]).length).toBe(1)
    // The other partitions were not touched.
    expect((JSON.parse((await tidemark('snapshots', 'list', url, '--job', job, '--partition', `${topic}-2`, '--json')).stdout) as unknown[]).length).toBe(2)
  })

  it('--topic T --partition N is refused with the name to give; a bare number names the consumer partitions it may mean', async () => {
    const { url, job, topic } = await consumerStore([10])
    const dir = tempDir()
    const commands = [
      ['snapshots', 'list', url], ['snapshots', 'show', url, '0000000001-000000000001'], ['snapshots', 'verify', url],
      ['restore', url, '--target', join(dir, 'restored')], ['gc', url, '--dry-run'], ['state', 'dump', url], ['state', 'get', url, 'k', '--state', 'sums'],
    ]
    for (const argv of commands) {
      const split = await tidemark(...argv, '--job', job, '--topic', topic, '--partition', '1')
      expect(split, argv.join(' ')).toMatchObject({ code: 2, stdout: '' })
      expect(split.stderr).toMatch(new RegExp(`^tidemark: --topic "${topic}" --partition 1: a consumer group's partition is named as \`tidemark jobs\` lists it, in one option: --partition ${topic}-1\nusage:\n`))
      const both = await tidemark(...argv, '--job', job, '--topic', topic, '--partition', `${topic}-1`)
      expect(both, argv.join(' ')).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(/^tidemark: --topic is not an option here: [^\n]*\(--partition orders-3\)\nusage:\n/) })
    }
    expect(existsSync(join(dir, 'restored'))).toBe(false)

    // The partition number alone: what the store holds under that number is named.
    const bare = await tidemark('snapshots', 'list', url, '--job', job, '--partition', '1')
    expect(bare).toMatchObject({ code: 0, stdout: `no snapshots of ${job}/1\n` })
    expect(bare.stderr).toMatch(new RegExp(`^tidemark: a consumer group's partitions are named <topic>-<partition>: --partition ${topic}-1; the store holds snapshots of job ${job} \\(partitions ${topic}-0, ${topic}-1, ${topic}-2, ${topic}-3\\); `))

    // A point-in-time read replays a file log into a numbered partition: not a consumer group's.
    const pit = await tidemark('state', 'dump', url, '--job', job, '--partition', `${topic}-1`, '--offset', '5', '--log', dir, '--handler', join(dir, 'h.mjs'))
    expect(pit).toMatchObject({ code: 2, stdout: '', stderr: expect.stringMatching(new RegExp(`^tidemark: --offset replays an embedded file log \\(--log\\) into a PartitionProcessor job's partition, a number; ${topic}-1 is a consumer group's partition`)) })
  })
})
