import { SESv2Client, SendEmailCommand } from '@aws-sdk/client-sesv2'
import nodemailer from 'nodemailer'

/** Messages sent before the timed ones: connections opened, code compiled. */
const WARMUP = 20

export interface RoundTrip {
  p50: number
  p99: number
}

/** Milliseconds of each of `count` sends made one after the other, after a warm-up. */
async function timeSends (count: number, send: (index: number) => Promise<unknown>): Promise<RoundTrip> {
  for (let i = 0; i < WARMUP; i++) await send(i)
  const times: number[] = []
  for (let i = 0; i < count; i++) {
    const started = performance.now()
    await send(i)
    times.push(performance.now() - started)
  }
  times.sort((a, b) => a - b)
  const at = (share: number): number => times[Math.min(times.length - 1, Math.floor(share * times.length))] ?? 0
  return { p50: at(0.5), p99: at(0.99) }
}

/**
 * The provider's own round trip, which every dispatch through it contains: one message at a
 * time from this process to the SES emulator with the SDK the service uses, with nothing of the
 * service in between.
 */
export async function sesRoundTrip (endpoint: string, count = 300): Promise<RoundTrip> {
  const client = new SESv2Client({ region: 'eu-west-1', endpoint, credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' } })
  try {
    return await timeSends(count, async (index) => await client.send(new SendEmailCommand({
      FromEmailAddress: 'no-reply@bench.example',
      Destination: { ToAddresses: [`round.trip${index}@example.com`] },
      Content: { Simple: { Subject: { Data: 'Your code' }, Body: { Text: { Data: 'Your code is 123456' } } } }
    })))
  } finally {
    client.destroy()
  }
}

/** The same for the SMTP sink: one message at a time over one pooled connection, as nodemailer sends. */
export async function smtpRoundTrip (port: number, count = 300): Promise<RoundTrip> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: 1 })
  try {
    return await timeSends(count, async (index) => await transport.sendMail({
      from: 'no-reply@bench.example', to: `round.trip${index}@example.com`, subject: 'Your code', text: 'Your code is 123456'
    }))
  } finally {
    transport.close()
  }
}
