// Vitest global setup: gives every test file an S3 server and a Kafka peer.
//
// TIDEMARK_S3_ENDPOINT set   -> use that S3 server (with TIDEMARK_S3_ACCESS_KEY,
//                               TIDEMARK_S3_SECRET_KEY, TIDEMARK_S3_REGION; the
//                               defaults fit docker-compose.yml's MinIO)
// otherwise                  -> start a throwaway radosgw (scripts/services/ceph-rgw)
// TIDEMARK_KAFKA_BROKERS set -> use those brokers (comma-separated host:port)
// otherwise                  -> start librdkafka's mock cluster (scripts/services/kafka-mock.sh)
//
// Started services run as child processes on 127.0.0.1 and on free ports, so
// parallel runs on one machine do not collide. They are stopped by the
// teardown, on SIGINT/SIGTERM of the runner, and, if the runner is killed with
// SIGKILL, by a watchdog that the start scripts leave behind (it polls the
// runner's PID). Tests read the result through test/helpers/services.ts.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { TestProject } from 'vitest/node'

export interface S3Endpoint {
  endpoint: string
  region: string
  accessKeyId: string
  secretAccessKey: string
  /** `radosgw` when this setup started it, `external` when it came from TIDEMARK_S3_ENDPOINT. */
  kind: 'radosgw' | 'external'
}

export interface KafkaEndpoint {
  brokers: string[]
  /** `mock` for librdkafka's mock cluster, `external` when it came from TIDEMARK_KAFKA_BROKERS. */
  kind: 'mock' | 'external'
}

export interface Services {
  s3: S3Endpoint
  kafka: KafkaEndpoint
}

declare module 'vitest' {
  export interface ProvidedContext {
    services: Services
  }
}

const ROOT = resolve(fileURLToPath(new URL('.', import.meta.url)), '../..')
const RGW_START = join(ROOT, 'scripts/services/ceph-rgw/start.sh')
const RGW_STOP = join(ROOT, 'scripts/services/ceph-rgw/stop.sh')
const KAFKA_MOCK = join(ROOT, 'scripts/services/kafka-mock.sh')

const APT_INSTALL = 'sudo apt-get install -y --no-install-recommends kcat radosgw ceph-mon ceph-osd curl'
const RGW_BINARIES = ['ceph-mon', 'ceph-osd', 'radosgw', 'radosgw-admin', 'ceph', 'ceph-authtool', 'monmaptool', 'curl']
const KAFKA_BINARIES = ['kcat']
const SCRIPT_BINARIES = ['bash', 'setsid']

/** A service this setup started: how to stop it, synchronously or not. */
interface Started {
  name: string
  stopArgs: string[]
  /** The start script while it runs; it leads its own process group. */
  starter: ChildProcess | undefined
}

const started: Started[] = []

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const env = process.env
  const s3External = nonEmpty(env.TIDEMARK_S3_ENDPOINT)
  const kafkaExternal = nonEmpty(env.TIDEMARK_KAFKA_BROKERS)

  const needed = [
    ...(s3External ? [] : RGW_BINARIES),
    ...(kafkaExternal ? [] : KAFKA_BINARIES),
  ]
  if (needed.length > 0) needed.push(...SCRIPT_BINARIES)
  const missing = needed.filter((bin) => !onPath(bin))
  if (missing.length > 0) {
    throw new Error(
      `The tests start radosgw and a Kafka mock as child processes, but ${missing.join(', ')} ` +
        `${missing.length === 1 ? 'is' : 'are'} not on PATH. Install them with:\n\n` +
        `  ${APT_INSTALL}\n\n` +
        'or point the tests at running servers with TIDEMARK_S3_ENDPOINT and TIDEMARK_KAFKA_BROKERS ' +
        '(for example `docker compose up -d`; see CONTRIBUTING.md, "Using other servers").',
    )
  }

  installSignalHandlers()
  const t0 = Date.now()
  try {
    const [s3, kafka] = await Promise.all([
      s3External
        ? Promise.resolve<S3Endpoint>({
            endpoint: s3External,
            region: nonEmpty(env.TIDEMARK_S3_REGION) ?? 'us-east-1',
            accessKeyId: nonEmpty(env.TIDEMARK_S3_ACCESS_KEY) ?? 'minioadmin',
            secretAccessKey: nonEmpty(env.TIDEMARK_S3_SECRET_KEY) ?? 'minioadmin',
            kind: 'external',
          })
        : startRadosgw(),
      kafkaExternal ? Promise.resolve(externalKafka(kafkaExternal)) : startKafkaMock(),
    ])
    const services: Services = { s3, kafka }
    project.provide('services', services)
    console.log(
      `[services] S3 ${s3.kind} ${s3.endpoint}, Kafka ${kafka.kind} ${kafka.brokers.join(',')}` +
        ` (ready in ${((Date.now() - t0) / 1000).toFixed(1)} s)`,
    )
  } catch (error) {
    await stopAll()
    throw error
  }
  return stopAll
}

async function startRadosgw(): Promise<S3Endpoint> {
  const fields = await startService('radosgw', [RGW_START], (dir) => [RGW_STOP, dir])
  return {
    endpoint: field(fields, 'endpoint'),
    region: 'us-east-1',
    accessKeyId: field(fields, 'access'),
    secretAccessKey: field(fields, 'secret'),
    kind: 'radosgw',
  }
}

async function startKafkaMock(): Promise<KafkaEndpoint> {
  const fields = await startService('kafka', [KAFKA_MOCK, 'start'], (dir) => [KAFKA_MOCK, 'stop', dir])
  return { brokers: field(fields, 'brokers').split(','), kind: 'mock' }
}

function externalKafka(list: string): KafkaEndpoint {
  const brokers = list.split(',').map((b) => b.trim()).filter((b) => b !== '')
  for (const broker of brokers) {
    if (!/^[^\s:]+:\d+$/.test(broker)) {
      throw new TypeError(`TIDEMARK_KAFKA_BROKERS must be a comma-separated list of host:port, got ${JSON.stringify(list)}`)
    }
  }
  return { brokers, kind: 'external' }
}

/**
 * Run a start script with a fresh data directory and wait for its
 * `READY key=value...` line. The script runs in its own process group
 * (detached) so that stopping the service also ends a startup in progress.
 */
function startService(
  name: string,
  startArgs: string[],
  stopArgs: (dir: string) => string[],
): Promise<Record<string, string>> {
  const dir = mkdtempSync(join(tmpdir(), `tidemark-${name}-`))
  const child = spawn('bash', [...startArgs, dir], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TIDEMARK_WATCH_PID: String(process.pid) },
  })
  const entry: Started = { name, stopArgs: stopArgs(dir), starter: child }
  started.push(entry)
  let stdout = ''
  let stderr = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  return new Promise((resolvePromise, reject) => {
    child.on('error', (error) => {
      entry.starter = undefined
      reject(new Error(`could not run ${startArgs.join(' ')}`, { cause: error }))
    })
    child.on('close', (code, signal) => {
      entry.starter = undefined
      const ready = stdout.split('\n').find((line) => line.startsWith('READY '))
      if (code === 0 && ready !== undefined) {
        resolvePromise(parseFields(ready))
      } else {
        reject(
          new Error(
            `${name} did not start (${startArgs.join(' ')} ${dir} exited with ${signal ?? code}):\n${stderr}${stdout}`,
          ),
        )
      }
    })
  })
}

function parseFields(line: string): Record<string, string> {
  const fields: Record<string, string> = {}
  for (const word of line.split(/\s+/).slice(1)) {
    const eq = word.indexOf('=')
    if (eq > 0) fields[word.slice(0, eq)] = word.slice(eq + 1)
  }
  return fields
}

function field(fields: Record<string, string>, key: string): string {
  const value = fields[key]
  if (value === undefined || value === '') throw new Error(`the READY line has no ${key}=`)
  return value
}

async function stopAll(): Promise<void> {
  removeSignalHandlers()
  const stopping = started.splice(0)
  await Promise.all(
    stopping.map(async (entry) => {
      killStarter(entry)
      await new Promise<void>((resolvePromise) => {
        const child = spawn('bash', entry.stopArgs, { stdio: 'ignore' })
        child.on('error', () => resolvePromise())
        child.on('close', () => resolvePromise())
      })
    }),
  )
}

/** For process exit and signals, where only synchronous work is certain to run. */
function stopAllSync(): void {
  for (const entry of started.splice(0)) {
    killStarter(entry)
    spawnSync('bash', entry.stopArgs, { stdio: 'ignore', timeout: 15_000 })
  }
}

function killStarter(entry: Started): void {
  const pid = entry.starter?.pid
  if (pid === undefined) return
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {
    // already gone
  }
}

function onSignal(signal: NodeJS.Signals): void {
  stopAllSync()
  // Vitest handles these signals itself (it exits); only when nobody else
  // listens must the default behaviour, dying by the signal, be restored.
  if (process.listenerCount(signal) === 0) process.kill(process.pid, signal)
}

function installSignalHandlers(): void {
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  process.once('exit', stopAllSync)
}

function removeSignalHandlers(): void {
  process.off('SIGINT', onSignal)
  process.off('SIGTERM', onSignal)
  process.off('exit', stopAllSync)
}

function nonEmpty(value: string | undefined): string | undefined {
  const trimmed = value?.trim()
  return trimmed === undefined || trimmed === '' ? undefined : trimmed
}

function onPath(bin: string): boolean {
  return (process.env.PATH ?? '')
    .split(delimiter)
    .some((dir) => dir !== '' && existsSync(join(dir, bin)))
}
