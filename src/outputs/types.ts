import type { TidemarkError } from '../errors.js'

/** What a handler emits (ctx.emit). */
export interface OutputRecord {
  /** Destination topic (Kafka), or log name under the file-log sink's directory. */
  topic: string
  /** Default null. */
  key?: string | Uint8Array | null
  /** null is a tombstone. Encode objects yourself (JSON.stringify). */
  value: string | Uint8Array | null
  /** Names starting with 'tidemark-' are reserved. */
  headers?: Readonly<Record<string, string | Uint8Array>>
  /** An explicit destination partition (Kafka); by default the sink's partitioner decides by key. */
  partition?: number
}

/** An output record as the outbox holds it and a sink receives it: with its id, in bytes. */
export interface OutboxRecord {
  /** The record id in its string form (formatRecordId); also its `tidemark-id` header. */
  readonly id: string
  readonly topic: string
  /** -1: by key. */
  readonly partition: number
  readonly key: Buffer | null
  readonly value: Buffer | null
  /** The handler's headers plus `tidemark-id`. */
  readonly headers: Readonly<Record<string, Buffer>>
}

/** The deterministic identity of an emitted record: which event emitted it, and its place among that event's emits. */
export interface RecordId {
  job: string
  topic: string
  partition: number
  offset: bigint
  /** 0, 1, 2, ... in emit order within the event. */
  index: number
}

/** Given to handlers when outputs are configured. */
export interface EmitContext {
  /** Buffers a record in the outbox of the handler's transaction; returns its id. */
  emit(record: OutputRecord): string
}

/**
 * Where delivered records go. send() resolves once every record is durably
 * accepted and keeps the order of records bound for the same destination
 * partition; when it rejects, nothing of the call is taken as delivered (some
 * may have been: they are sent again, with the same ids).
 */
export interface OutputSink {
  readonly name: string
  /**
   * Optional: throws a RangeError for a topic this sink can never deliver
   * to. Called at emit, so that such a record fails its handler instead of
   * being committed and then retried without end.
   */
  validateTopic?(topic: string): void
  send(records: readonly OutboxRecord[]): Promise<void>
  /**
   * Optional, in place of send(): the same records in their binary form
   * (encodeOutboxRecord), for a sink that writes those bytes or reads only
   * a few fields. When present the publisher calls it instead of send() and
   * decodes nothing itself (each record is still checked, as for send()).
   * The same contract as send(); the views are valid until it settles.
   */
  sendEncoded?(records: EncodedRecords): Promise<void>
  close(): Promise<void>
}

/** A batch of output records in their binary form, as the outbox holds them (see OutputSink.sendEncoded). */
export interface EncodedRecords {
  readonly length: number
  /** Record i's topic (0 <= i < length; otherwise a RangeError). */
  topic(i: number): string
  /** Record i's binary form: encodeOutboxRecord()'s bytes, a view of the outbox entry. */
  bytes(i: number): Buffer
  /** Record i decoded (what send() would get). */
  record(i: number): OutboxRecord
}

export interface RetryOptions {
  /** First backoff after a failed send. Default 100 ms. */
  initialMs?: number
  /** Largest backoff. Default 10 s. */
  maxMs?: number
}

export interface OutputsOptions {
  sink: OutputSink
  /** The partition pauses while the committed outbox holds at least this many records. Default 100,000. */
  maxOutboxRecords?: number
  /** ...or at least this many bytes. Default 64 MiB. */
  maxOutboxBytes?: number
  /** Records per send. Default 500. */
  maxBatchRecords?: number
  retry?: RetryOptions
  /**
   * How long closing the partition waits for a send in flight, whose
   * delivered records it then removes from the outbox (so a clean stop sends
   * nothing twice). Past it the partition closes anyway with a
   * 'delivery-failed' event, and the next start sends those records again.
   * Default 10 s.
   */
  closeTimeoutMs?: number
}

/** Dropping records already applied, by their `tidemark-id` header. */
export type DedupeMode = 'off' | 'tidemark-ids'

export type OutputsEvent =
  /** Records were accepted by the sink and removed from the outbox. */
  | { type: 'delivered'; records: number; bytes: number }
  /** A send failed (error: TIDEMARK_OUTPUT_DELIVERY_FAILED); it is retried after retryInMs. */
  | { type: 'delivery-failed'; error: TidemarkError; attempt: number; retryInMs: number }
  /** The outbox reached its limit: the partition pauses until delivery makes room. */
  | { type: 'outbox-full'; records: number; bytes: number }
  /** Delivery made room: the partition goes on. */
  | { type: 'outbox-resumed'; records: number; bytes: number }
  /** A record whose id was already applied was dropped (dedupe). */
  | { type: 'duplicate-skipped'; id: string }
