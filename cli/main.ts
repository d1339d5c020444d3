#!/usr/bin/env node
import { run } from './email-otp.js'

process.exitCode = await run(process.argv.slice(2), {
  out: (line) => { process.stdout.write(line + '\n') },
  note: (line) => { process.stderr.write(line + '\n') },
  env: process.env
})
