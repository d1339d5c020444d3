/*
 * The SMTP peer of the SMTP dispatch runs: a real `smtp-server` on 127.0.0.1:$PORT, without
 * TLS or authentication, that reads every message to its end and keeps nothing. Started by
 * bench/run.ts in its own process, so its CPU is not charged to the service. With $REFUSE (a
 * comma-separated list of addresses) it refuses those recipients with 550, as a relay that
 * knows its mailboxes does (bench/suppressed-timing.ts).
 */
import { SMTPServer } from 'smtp-server'

const refused = new Set((process.env.REFUSE ?? '').split(',').filter((address) => address !== ''))

const server = new SMTPServer({
  secure: false,
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  // The service's pool opens up to its own ceiling of connections; the sink takes them all.
  maxClients: 1000,
  onRcptTo (address, _session, callback) {
    callback(refused.has(address.address) ? Object.assign(new Error('no such user'), { responseCode: 550 }) : undefined)
  },
  onData (stream, _session, callback) {
    stream.on('end', () => { callback() })
    stream.resume()
  }
})
server.listen(Number(process.env.PORT), '127.0.0.1')
