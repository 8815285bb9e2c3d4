package bpf

// Short names for the lab program's types (lab.c): its traffic
// generator's settings and frames. The programs' shared types are in
// package abi.
type (
	TgConfig = LabTgConfig
	TgFrame  = LabTgFrame
)

// The generator's limits (enum tg_limit).
const (
	TgMaxFrame  = int(LabTgLimitTG_MAX_FRAME)
	TgMaxFrames = int(LabTgLimitTG_MAX_FRAMES)
)
