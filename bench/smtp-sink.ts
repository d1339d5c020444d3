/*
 * The SMTP peer of the SMTP dispatch runs: a real `smtp-server` on 127.0.0.1:$PORT, without
 * TLS or authentication, that reads every message to its end and keeps nothing. Started by
 * bench/run.ts in its own process, so its CPU is not charged to the service.
 */
import { SMTPServer } from 'smtp-server'

const server = new SMTPServer({
  secure: false,
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  // The service's pool opens up to its own ceiling of connections; the sink takes them all.
  maxClients: 1000,
  onData (stream, _session, callback) {
    stream.on('end', () => { callback() })
    stream.resume()
  }
})
server.listen(Number(process.env.PORT), '127.0.0.1')
