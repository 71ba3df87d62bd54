// Proves that the services of the test run answer: an S3 round trip and a
// Kafka produce/consume round trip, with real content.
import { randomBytes } from 'node:crypto'
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3'
import { Kafka, Partitioners, logLevel, type KafkaMessage } from 'kafkajs'
import { describe, expect, onTestFinished, test } from 'vitest'
import { kafkaService, s3Service } from '../helpers/services.js'
import { randomName } from '../helpers/tmp.js'

describe('test services', () => {
  test('S3 stores an object and returns it', async () => {
    const { endpoint, region, accessKeyId, secretAccessKey, forcePathStyle } = s3Service()
    const s3 = new S3Client({ endpoint, region, forcePathStyle, credentials: { accessKeyId, secretAccessKey } })
    const bucket = randomName('smoke')
    const key = 'dir/object.bin'
    const body = randomBytes(64 * 1024)

    await s3.send(new CreateBucketCommand({ Bucket: bucket }))
    onTestFinished(async () => {
      await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }))
      await s3.send(new DeleteBucketCommand({ Bucket: bucket }))
      s3.destroy()
    })
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }))

    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }))
    expect(got.ContentLength).toBe(body.length)
    const bytes = await got.Body?.transformToByteArray()
    expect(Buffer.from(bytes ?? []).equals(body)).toBe(true)

    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'dir/' }))
    expect(listed.Contents?.map((o) => o.Key)).toEqual([key])
  })

  test('Kafka delivers a produced message to a consumer group', async () => {
    const kafka = new Kafka({ clientId: 'tidemark-smoke', brokers: kafkaService().brokers, logLevel: logLevel.NOTHING })
    const topic = randomName('smoke')
    const value = `hello ${randomBytes(8).toString('hex')}`

    const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
    const consumer = kafka.consumer({ groupId: randomName('smoke-group') })
    onTestFinished(async () => {
      await consumer.disconnect()
      await producer.disconnect()
    })

    await producer.connect()
    const [sent] = await producer.send({ topic, messages: [{ key: 'k', value }] })
    expect(sent?.errorCode).toBe(0)

    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    const received = new Promise<{ partition: number; message: KafkaMessage }>((resolve, reject) => {
      consumer.run({ eachMessage: async ({ partition, message }) => resolve({ partition, message }) }).catch(reject)
    })
    const { partition, message } = await received

    expect(partition).toBe(sent?.partition)
    expect(message.offset).toBe(sent?.baseOffset)
    expect(message.key?.toString()).toBe('k')
    expect(message.value?.toString()).toBe(value)
  })
})
